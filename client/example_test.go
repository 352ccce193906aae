package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/parleychat/parley/client"
)

// This example needs a running server, so it is compiled but not run.
func Example() {
	ctx := context.Background()

	// The operator creates a user and mints a token for one of their devices.
	admin := client.NewAdmin("http://127.0.0.1:8080", "admin-secret", nil)
	if _, _, err := admin.CreateUser(ctx, "alice", "Alice"); err != nil {
		log.Fatal(err)
	}
	tok, err := admin.IssueToken(ctx, "alice", "laptop", 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}

	inbox := client.NewInbox()
	c := client.New(client.Options{
		BaseURL:       "http://127.0.0.1:8080",
		Token:         tok.Token,
		UserID:        "alice",
		Inbox:         inbox,
		AutoDelivered: true,
		OnEvent: func(ev client.SyncEvent) {
			log.Printf("event %d: %s in %s", ev.Cursor, ev.Type, ev.ConvID)
			if m, err := ev.Message(); err == nil { // ErrEventType for other events
				if text, ok := m.Text(); ok {
					log.Printf("%s: %s", m.SenderID, text)
				}
			}
		},
	})
	if err := c.Connect(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	conv, err := c.CreateDirect(ctx, "bob")
	if err != nil {
		log.Fatal(err)
	}
	ack, err := c.SendText(ctx, conv.ConvID, "hello, bob") // content {"text": "hello, bob"}
	var perr *client.Error
	switch {
	case errors.As(err, &perr) && perr.Code == 404:
		log.Fatal("no such conversation, or not a member any more")
	case err != nil:
		log.Fatal(err)
	}
	log.Printf("stored as seq %d (cursor now %d)", ack.Seq, c.Cursor())
}

// Sending a photo: upload it (resumably, in chunks), then send a message that names it;
// the receiver reads the attachment's metadata from the message and downloads the bytes.
// This example needs a running server, so it is compiled but not run.
func ExampleClient_Upload() {
	ctx := context.Background()
	c := client.New(client.Options{BaseURL: "http://127.0.0.1:8080", Token: "alice's token"})

	f, err := os.Open("cat.jpg")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		log.Fatal(err)
	}
	a, err := c.Upload(ctx, f, fi.Size(), client.UploadOptions{
		OnCreated:  func(id string) { log.Printf("save %s to ResumeUpload after a restart", id) },
		OnProgress: func(sent, total int64) { log.Printf("%d/%d bytes", sent, total) },
	})
	switch client.ErrorCode(err) {
	case 0:
	case 413:
		log.Fatal("the file is over the server's size limit")
	case 429:
		log.Fatal("today's upload quota is spent")
	default:
		log.Fatal(err)
	}
	log.Printf("%s: %s, %dx%d, sha256 %s", a.ID, a.MimeType, a.Width, a.Height, a.SHA256)
	if _, err := c.SendAttachment(ctx, "d_conv", client.ContentImage, a.ID, "cat.jpg", "look"); err != nil {
		log.Fatal(err)
	}

	// On the receiving side, for a message m of the conversation:
	var m client.Message
	if att := m.Attachment(); att != nil && att.Attachment != nil {
		out, err := os.Create(att.Name)
		if err != nil {
			log.Fatal(err)
		}
		defer out.Close()
		if _, err := c.Download(ctx, att.AttachmentID, out); err != nil { // checks the SHA-256
			log.Fatal(err)
		}
	}
}

// Reading the typed data of each event type; Text decodes a text message's content.
func ExampleSyncEvent() {
	events := []client.SyncEvent{
		{Cursor: 1, Type: client.EventMessage, ConvID: "d_c", Data: json.RawMessage(
			`{"seq":1,"sender_id":"alice","content_type":1,"content":{"text":"hi Bob"}}`)},
		{Cursor: 2, Type: client.EventRead, ConvID: "d_c", Data: json.RawMessage(`{"user_id":"bob","read_seq":1}`)},
		{Cursor: 3, Type: client.EventMessage, ConvID: "d_c", Data: json.RawMessage(
			`{"seq":2,"sender_id":"alice","content_type":2,"content":{"url":"https://example.com/cat.jpg"}}`)},
	}
	for _, ev := range events {
		switch ev.Type {
		case client.EventMessage:
			m, _ := ev.Message()
			if text, ok := m.Text(); ok {
				fmt.Printf("%s in %s: %s\n", m.SenderID, m.ConvID, text)
			} else {
				fmt.Printf("%s in %s: a message of content type %d\n", m.SenderID, m.ConvID, m.ContentType)
			}
		case client.EventRead:
			r, _ := ev.Read()
			fmt.Printf("%s read up to seq %d\n", r.UserID, r.ReadSeq)
		}
	}
	// Output:
	// alice in d_c: hi Bob
	// bob read up to seq 1
	// alice in d_c: a message of content type 2
}
