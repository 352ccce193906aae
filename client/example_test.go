package client_test

import (
	"context"
	"errors"
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
	ack, err := c.Send(ctx, conv.ConvID, client.ContentText, "hello, bob", nil)
	var perr *client.Error
	switch {
	case errors.As(err, &perr) && perr.Code == 404:
		log.Fatal("no such conversation, or not a member any more")
	case err != nil:
		log.Fatal(err)
	}
	log.Printf("stored as seq %d (cursor now %d)", ack.Seq, c.Cursor())
}
