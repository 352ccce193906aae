package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
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
