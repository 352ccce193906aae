package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/parleytest"
)

// typingSession connects a Client whose typing pushes go to the channel it returns.
func typingSession(t *testing.T, s *parleytest.Server, token, userID string) (*client.Client, <-chan client.TypingPush) {
	t.Helper()
	got := make(chan client.TypingPush, 64)
	c := connected(t, client.Options{BaseURL: s.URL, Token: token, UserID: userID,
		OnTyping: func(p client.TypingPush) { got <- p }})
	return c, got
}

// connected returns a Client of opts connected, closed at the test's end.
func connected(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	c := client.New(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func nextTyping(t *testing.T, got <-chan client.TypingPush) client.TypingPush {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no typing push within 10 s")
	}
	return client.TypingPush{}
}

// TestTypingSDK: keystrokes in a burst send one "started", which bob's OnTyping receives
// with its expiry; sending the message sends "stopped"; SendTyping reports the server's
// dropping and a non-member's 404.
func TestTypingSDK(t *testing.T) {
	s := parleytest.Start(t)
	aliceTok, bobTok, carolTok := s.User(t, "alice"), s.User(t, "bob"), s.User(t, "carol")
	alice, _ := typingSession(t, s, aliceTok, "alice")
	_, bobGot := typingSession(t, s, bobTok, "bob")
	carol, _ := typingSession(t, s, carolTok, "carol")
	ctx := context.Background()
	conv, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}

	for range 10 {
		alice.Keystroke(conv.ConvID)
	}
	p := nextTyping(t, bobGot)
	if p.ConvID != conv.ConvID || p.UserID != "alice" || p.State != "started" || p.ExpiresInMS != 6000 {
		t.Fatalf("typing push %+v", p)
	}
	if _, err := alice.SendText(ctx, conv.ConvID, "done typing"); err != nil {
		t.Fatal(err)
	}
	if p := nextTyping(t, bobGot); p.State != "stopped" || p.UserID != "alice" {
		t.Fatalf("after the send: %+v, want stopped", p)
	}
	select {
	case p := <-bobGot:
		t.Fatalf("a burst of 10 keystrokes and a send made another push: %+v", p)
	default:
	}

	if fw, err := alice.SendTyping(ctx, conv.ConvID, "started"); err != nil || fw {
		t.Fatalf("a started within 3 s of the last: forwarded %v, err %v; want dropped", fw, err)
	}
	if _, err := carol.SendTyping(ctx, conv.ConvID, "started"); client.ErrorCode(err) != 404 {
		t.Fatalf("non-member: %v, want 404", err)
	}
}
