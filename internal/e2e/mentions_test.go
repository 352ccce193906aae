package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/server"
)

// mentionMessage is textMessage with mentions.
func mentionMessage(convID, clientMsgID string, mentions ...string) map[string]any {
	m := textMessage(convID, clientMsgID)
	m["mentions"] = mentions
	return m
}

// messageEvents returns the "message" events of evs.
func messageEvents(evs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["type"] == "message" {
			out = append(out, ev)
		}
	}
	return out
}

// TestMentionsInReadFanoutGroup: in a read-fanout group a message's mentioned members get
// it in their log (GET /v1/sync has the message event, with its mentions), the others do
// not; the mentions are kept as sent without repeats, non-members and the sender included,
// and every read of the message shows them; a mentioned member with the conversation open
// gets the message once on a WebSocket, as the event, while an unmentioned one gets the
// push; a retry is answered the original; invalid mentions are 400s.
func TestMentionsInReadFanoutGroup(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
	alice, bob, carol, dave := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol"), n.user(t, "dave")
	n.user(t, "erin") // not in the group
	g := n.group(t, alice, "all hands", false, "bob", "carol", "dave")
	convID := g["conv_id"].(string)
	if g["fanout"] != "read" {
		t.Fatalf("a group of 4 with --write-fanout-max 2: %s, want read fanout", show(g))
	}
	from := map[string]int64{}
	for name, token := range map[string]string{"alice": alice, "bob": bob, "carol": carol, "dave": dave} {
		from[name] = n.latest(t, token)
	}
	bobWS, carolWS := n.dial(t, bob, from["bob"]), n.dial(t, carol, from["carol"])
	for _, ws := range []*wsClient{bobWS, carolWS} {
		if r := ws.do("open", map[string]any{"conv_id": convID}); num(r["code"]) != 0 {
			t.Fatalf("open: %s", show(r))
		}
	}

	ack := n.ok(t, "POST", "/v1/messages", alice, mentionMessage(convID, "m1", "bob", "erin", "alice", "bob", "nobody"))
	wantKeys(t, "ack", ack, ackKeys...)
	if num(ack["seq"]) != 1 || ack["duplicate"] != false {
		t.Fatalf("ack %s, want seq 1", show(ack))
	}
	wantMentions := `[bob erin alice nobody]`

	// bob's log has the message; carol's, dave's and alice's (the sender's) do not.
	bobEvents := messageEvents(n.events(t, bob, from["bob"]))
	if len(bobEvents) != 1 {
		t.Fatalf("bob's message events after the mention: %s, want one", show(bobEvents))
	}
	ev := bobEvents[0]
	wantKeys(t, "bob's event", ev, eventKeys...)
	data := obj(t, ev["data"])
	wantKeys(t, "the event's message", data, append(messageKeys, "mentions")...)
	if ev["conv_id"] != convID || num(data["seq"]) != 1 || data["msg_id"] != ack["msg_id"] || fmt.Sprint(data["mentions"]) != wantMentions {
		t.Fatalf("bob's event %s, want message 1 with mentions %s", show(ev), wantMentions)
	}
	for name, token := range map[string]string{"alice": alice, "carol": carol, "dave": dave} {
		if evs := messageEvents(n.events(t, token, from[name])); len(evs) != 0 {
			t.Errorf("%s, not mentioned (or the sender), has message events %s", name, show(evs))
		}
	}
	if h := n.history(t, carol, convID, 0); len(h) != 1 || fmt.Sprint(h[0]["mentions"]) != wantMentions {
		t.Errorf("history %s, want message 1 with mentions %s", show(h), wantMentions)
	}

	// A message without mentions: in nobody's log, and its wire form has no mentions key.
	n.send(t, alice, convID, "m2")
	if evs := messageEvents(n.events(t, bob, from["bob"])); len(evs) != 1 {
		t.Errorf("bob's message events after an unmentioned message: %s, want still one", show(evs))
	}
	h := n.history(t, bob, convID, 1)
	if len(h) != 1 {
		t.Fatalf("history after 1: %s", show(h))
	}
	wantKeys(t, "a message without mentions", h[0], messageKeys...)

	// WebSocket: bob gets message 1 as his log's event and no push of it, then the push
	// of message 2; carol, not mentioned, gets both pushes.
	if p := bobWS.push(); p["op"] != "event" || obj(t, p["event"])["type"] != "message" || num(obj(t, obj(t, p["event"])["data"])["seq"]) != 1 {
		t.Fatalf("bob's first push %s, want the event of message 1", show(p))
	}
	if p := bobWS.push(); p["op"] != "message" || num(obj(t, p["message"])["seq"]) != 2 {
		t.Fatalf("bob's next push %s, want the push of message 2 (message 1 only once, as the event)", show(p))
	}
	for seq := int64(1); seq <= 2; seq++ {
		p := carolWS.pushOf("message")
		if m := obj(t, p["message"]); num(m["seq"]) != seq || (seq == 1 && fmt.Sprint(m["mentions"]) != wantMentions) {
			t.Fatalf("carol's push %s, want message %d", show(p), seq)
		}
	}

	// A retry gets the original ack, and writes nothing more.
	dup := n.ok(t, "POST", "/v1/messages", alice, mentionMessage(convID, "m1", "dave"))
	if dup["duplicate"] != true || num(dup["seq"]) != 1 {
		t.Errorf("retry %s, want the original ack", show(dup))
	}
	if evs := messageEvents(n.events(t, dave, from["dave"])); len(evs) != 0 {
		t.Errorf("dave, named by a retry only, has message events %s", show(evs))
	}

	// The rules of the field.
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprint("u", i)
	}
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{mentionMessage(convID, "bad1", many...), "invalid request: mentions has more than 50 entries"},
		{mentionMessage(convID, "bad2", "bob", "no body"), "invalid request: mentions[1] is not a valid user_id"},
		{map[string]any{"conv_id": convID, "client_msg_id": "bad3", "content_type": 1, "content": "x", "mentions": "bob"},
			`invalid request: field "mentions" must be an array`},
	} {
		r := n.fail(t, 400, "POST", "/v1/messages", alice, tc.body)
		if got := object(t, r.raw)["error"]; got != tc.want {
			t.Errorf("error %q, want %q", got, tc.want)
		}
	}
	if ms := n.history(t, bob, convID, 2); len(ms) != 0 {
		t.Errorf("refused sends stored %s", show(ms))
	}
	// At the limit is fine, over a WebSocket too.
	r := bobWS.do("send", mentionMessage(convID, "bob-50", many[:50]...))
	if num(r["code"]) != 0 || num(r["seq"]) != 3 {
		t.Errorf("send with 50 mentions over the WebSocket: %s", show(r))
	}
	if got := messageEvents(n.events(t, alice, from["alice"])); len(got) != 0 || strings.Contains(show(got), "bob-50") {
		t.Errorf("alice, not mentioned, got %s", show(got))
	}
}
