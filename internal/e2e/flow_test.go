package e2e

import (
	"slices"
	"testing"
)

// TestChatFlow walks the five steps of a conversation (users, direct conversation, send,
// sync, read) and checks at each step what both users, and both devices of bob, see:
// events in the exact order of PROTOCOL section 8, unread counts, and the sender's MsgState
// (section 6) as peer_delivered_seq / peer_read_seq.
func TestChatFlow(t *testing.T) {
	n := start(t)

	// Step 1: users. bob has two devices, both online.
	alice := n.user(t, "alice")
	bob1 := n.user(t, "bob")
	bob2 := n.Token(t, "bob", "d2")
	aliceWS := n.dial(t, alice, 0)
	bobWS1, bobWS2 := n.dial(t, bob1, 0), n.dial(t, bob2, 0)

	// Step 2: the direct conversation, created by both sides.
	first := n.direct(t, alice, "bob")
	convID := first["conv_id"].(string)
	if again := n.direct(t, bob1, "alice"); again["conv_id"] != convID {
		t.Fatalf("bob's create gave conv_id %v, alice's %v: a direct conversation has one id", again["conv_id"], convID)
	}
	if again := n.direct(t, alice, "bob"); again["conv_id"] != convID {
		t.Fatalf("second create by alice gave conv_id %v, want %v", again["conv_id"], convID)
	}
	for _, c := range []struct {
		name string
		ws   *wsClient
	}{{"alice", aliceWS}, {"bob d1", bobWS1}, {"bob d2", bobWS2}} {
		ev := c.ws.event()
		wantFields(t, c.name+" conv_updated", ev, map[string]any{"cursor": 1, "type": "conv_updated", "conv_id": convID})
		checkBrief(t, c.name+" conv_updated data", obj(t, ev["data"]))
	}
	if b := find(n.listed(t, bob1), convID); b == nil {
		t.Fatal("the direct conversation is not in bob's list before any message")
	}

	// Step 3: alice sends. MsgState 2 (sent): the peer has neither delivered nor read it.
	ack := n.send(t, alice, convID, "hello-1")
	wantFields(t, "ack", ack, map[string]any{"seq": 1, "duplicate": false})
	wantFields(t, "alice's brief after sending", n.brief(t, alice, convID), map[string]any{
		"max_seq": 1, "read_seq": 1, "unread": 0, "peer_delivered_seq": 0, "peer_read_seq": 0,
	})
	for _, c := range []struct {
		name string
		ws   *wsClient
	}{{"alice", aliceWS}, {"bob d1", bobWS1}, {"bob d2", bobWS2}} {
		ev := c.ws.event()
		wantFields(t, c.name+" message push", ev, map[string]any{"cursor": 2, "type": "message", "conv_id": convID})
		wantFields(t, c.name+" message data", obj(t, ev["data"]), map[string]any{"seq": 1, "msg_id": ack["msg_id"], "sender_id": "alice"})
	}

	// Step 4: sync. Both of bob's devices count one unread; bob's d1 acknowledges delivery,
	// which alice sees as a delivered event and as MsgState 3.
	resp := n.ok(t, "GET", "/v1/sync?cursor=1", bob1, nil)
	if evs := arr(t, resp["events"]); len(evs) != 1 || evs[0]["type"] != "message" {
		t.Fatalf("bob's sync from 1: %s", show(resp))
	}
	for _, tok := range []string{bob1, bob2} {
		wantFields(t, "bob's listed brief", find(n.listed(t, tok), convID), map[string]any{"unread": 1, "read_seq": 0})
	}
	wantFields(t, "delivered answer", n.ok(t, "POST", "/v1/conversations/"+convID+"/delivered", bob1, map[string]any{"seq": 1}),
		map[string]any{"delivered_seq": 1})
	ev := aliceWS.event()
	wantFields(t, "alice's delivered push", ev, map[string]any{"cursor": 3, "type": "delivered", "conv_id": convID})
	wantFields(t, "delivered data", obj(t, ev["data"]), map[string]any{"user_id": "bob", "delivered_seq": 1})
	wantFields(t, "alice's brief: MsgState 3", n.brief(t, alice, convID), map[string]any{"peer_delivered_seq": 1, "peer_read_seq": 0})

	// Step 5: read on bob's other device. Every device of bob and alice get the read
	// event; both devices then count 0 unread; alice sees MsgState 4.
	wantFields(t, "read answer", n.ok(t, "POST", "/v1/conversations/"+convID+"/read", bob2, map[string]any{"seq": 1}),
		map[string]any{"read_seq": 1})
	for _, c := range []struct {
		name   string
		ws     *wsClient
		cursor int
	}{{"alice", aliceWS, 4}, {"bob d1", bobWS1, 3}, {"bob d2", bobWS2, 3}} {
		ev := c.ws.event()
		wantFields(t, c.name+" read push", ev, map[string]any{"cursor": c.cursor, "type": "read", "conv_id": convID})
		wantFields(t, c.name+" read data", obj(t, ev["data"]), map[string]any{"user_id": "bob", "read_seq": 1})
	}
	for _, tok := range []string{bob1, bob2} {
		wantFields(t, "bob's brief after reading", n.brief(t, tok, convID), map[string]any{"unread": 0, "read_seq": 1, "delivered_seq": 1})
	}
	wantFields(t, "alice's brief: MsgState 4", n.brief(t, alice, convID), map[string]any{"peer_delivered_seq": 1, "peer_read_seq": 1})

	// bob replies: his send moves his own read position with no read event of its own, and
	// alice sees it as peer_read_seq 2.
	reply := n.send(t, bob1, convID, "reply-1")
	wantFields(t, "reply ack", reply, map[string]any{"seq": 2})
	wantFields(t, "alice's brief after the reply", n.brief(t, alice, convID), map[string]any{
		"max_seq": 2, "unread": 1, "peer_read_seq": 2, "peer_delivered_seq": 2,
	})

	// The complete logs, in order.
	for _, c := range []struct {
		name, token string
		want        []string
	}{
		{"alice", alice, []string{"conv_updated", "message", "delivered", "read", "message"}},
		{"bob", bob1, []string{"conv_updated", "message", "read", "message"}},
	} {
		evs := n.events(t, c.token, 0)
		if got := types(evs); !slices.Equal(got, c.want) {
			t.Fatalf("%s's event log %v, want exactly %v\n%s", c.name, got, c.want, show(evs))
		}
		for i, ev := range evs {
			checkEventData(t, ev)
			if num(ev["cursor"]) != int64(i+1) {
				t.Fatalf("%s's event %d has cursor %v", c.name, i, ev["cursor"])
			}
		}
	}
	for _, ws := range []*wsClient{aliceWS, bobWS1, bobWS2} {
		ev := ws.event()
		if ev["type"] != "message" {
			t.Fatalf("push after the reply: %s, want the message (no read event for the sender)", show(ev))
		}
	}
}
