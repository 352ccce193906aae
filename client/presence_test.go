package client

import (
	"fmt"
	"testing"
)

// TestPresenceRestoredAfterReconnect: the users followed and this device's away belong to
// the connection, so a new one is told them again (the set in place of the server's, then
// away), the first one too when the app subscribed before it; OnPresence gets every answer
// and push.
func TestPresenceRestoredAfterReconnect(t *testing.T) {
	f := newFake(t)
	got := make(chan []Presence, 16)
	c := f.client(t, Options{OnPresence: func(ps []Presence) { got <- ps }})
	ctx := testCtx(t)
	if _, err := c.SubscribePresence(ctx, []string{"carol", "bob"}, false); err != ErrNotConnected {
		t.Fatalf("subscribing before Connect: %v, want ErrNotConnected", err)
	}
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	fc := recv(t, f.conns, "connection")
	if fr := recv(t, fc.frames, "subscribe"); fmt.Sprint(fr["users"]) != "[bob carol]" || fr["replace"] != true {
		t.Fatalf("frame %v, want presence_subscribe bob carol in place of the set", fr)
	}
	if ps := recv(t, got, "the answer"); len(ps) != 2 || ps[0].UserID != "bob" || ps[1].State != PresenceOffline {
		t.Fatalf("OnPresence got %+v, want the answer", ps)
	}
	if _, err := c.SubscribePresence(ctx, []string{"dave"}, false); err != nil {
		t.Fatal(err)
	}
	if fr := recv(t, fc.frames, "subscribe"); fmt.Sprint(fr["users"]) != "[dave]" || fr["replace"] != nil {
		t.Fatalf("frame %v, want presence_subscribe dave, adding", fr)
	}
	recv(t, got, "dave's answer")
	fc.write(map[string]any{"op": "presence", "presence": []Presence{{UserID: "bob", State: PresenceOnline}}})
	if ps := recv(t, got, "a push"); len(ps) != 1 || ps[0] != (Presence{UserID: "bob", State: PresenceOnline}) {
		t.Fatalf("OnPresence got %+v, want bob online", ps)
	}
	if err := c.UnsubscribePresence(ctx, []string{"carol", "dave"}); err != nil {
		t.Fatal(err)
	}
	if fr := recv(t, fc.frames, "unsubscribe"); fr["op"] != "presence_unsubscribe" || fmt.Sprint(fr["users"]) != "[carol dave]" {
		t.Fatalf("frame %v, want presence_unsubscribe carol dave", fr)
	}
	if err := c.SetAway(ctx, true); err != nil {
		t.Fatal(err)
	}
	if fr := recv(t, fc.frames, "away"); fr["op"] != "presence_set" || fr["state"] != "away" {
		t.Fatalf("frame %v, want presence_set away", fr)
	}

	fc.ws.Close()
	fc2 := recv(t, f.conns, "second connection")
	if fr := recv(t, fc2.frames, "resubscribe"); fr["op"] != "presence_subscribe" || fmt.Sprint(fr["users"]) != "[bob]" || fr["replace"] != true {
		t.Fatalf("frame %v after reconnect, want presence_subscribe bob in place of the set", fr)
	}
	if fr := recv(t, fc2.frames, "away again"); fr["op"] != "presence_set" || fr["state"] != "away" {
		t.Fatalf("frame %v after reconnect, want presence_set away", fr)
	}
	if ps := recv(t, got, "the new answer"); len(ps) != 1 || ps[0].UserID != "bob" {
		t.Fatalf("OnPresence got %+v after reconnect, want bob's state", ps)
	}
}
