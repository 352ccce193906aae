package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestDeleteConversation covers DELETE /v1/conversations/{id} (PROTOCOL section 5): hidden
// from the caller's list on all devices, cleared_seq, history cleared for the caller only,
// GET still 200, and visible again with the next message.
func TestDeleteConversation(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	alice2 := n.Token(t, "alice", "d2")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	for i := 1; i <= 3; i++ {
		n.send(t, bob, convID, fmt.Sprintf("m%d", i))
	}
	other := n.dial(t, alice2, -1)
	other.ping()

	n.ok(t, "DELETE", "/v1/conversations/"+convID, alice, nil)

	t.Run("conv_deleted to the user's devices", func(t *testing.T) {
		ev := other.event()
		wantFields(t, "conv_deleted push", ev, map[string]any{"type": "conv_deleted", "conv_id": convID})
		wantKeys(t, "conv_deleted data", obj(t, ev["data"]), "cleared_seq")
		wantFields(t, "conv_deleted data", obj(t, ev["data"]), map[string]any{"cleared_seq": 3})
	})
	t.Run("hidden for the caller only", func(t *testing.T) {
		for _, tok := range []string{alice, alice2} {
			if b := find(n.listed(t, tok), convID); b != nil {
				t.Fatalf("deleted conversation still listed: %s", show(b))
			}
		}
		snap := n.ok(t, "GET", "/v1/sync/snapshot", alice, nil)
		if find(arr(t, snap["conversations"]), convID) != nil {
			t.Fatal("deleted conversation in alice's snapshot")
		}
		if find(n.listed(t, bob), convID) == nil {
			t.Fatal("alice's delete hid the conversation from bob")
		}
		for _, ty := range types(n.events(t, bob, 0)) {
			if ty == "conv_deleted" {
				t.Fatal("bob got a conv_deleted event for alice's delete")
			}
		}
		if got := seqs(n.history(t, bob, convID, 0)); fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("bob's history %v: alice's delete must not clear it", got)
		}
	})
	t.Run("GET still answers, with cleared_seq", func(t *testing.T) {
		b := n.brief(t, alice, convID)
		checkBrief(t, "deleted brief", b)
		wantFields(t, "deleted brief", b, map[string]any{"cleared_seq": 3, "max_seq": 3, "unread": 0, "last_message": nil})
		if h := n.history(t, alice, convID, 0); len(h) != 0 {
			t.Fatalf("alice's history after delete: %s", show(h))
		}
		n.fail(t, http.StatusNotFound, "GET", "/v1/conversations/"+convID+"/receipts?seq=4", alice, nil)
	})
	t.Run("next message makes it visible again", func(t *testing.T) {
		n.send(t, bob, convID, "m4")
		for _, tok := range []string{alice, alice2} {
			b := find(n.listed(t, tok), convID)
			if b == nil {
				t.Fatal("conversation still hidden after a new message")
			}
			wantFields(t, "reappeared brief", b, map[string]any{"cleared_seq": 3, "max_seq": 4, "unread": 1})
			wantFields(t, "reappeared last_message", obj(t, b["last_message"]), map[string]any{"seq": 4})
		}
		if got := seqs(n.history(t, alice, convID, 0)); fmt.Sprint(got) != "[4]" {
			t.Fatalf("alice's history %v, want [4]", got)
		}
		page := n.ok(t, "GET", "/v1/conversations/"+convID+"/messages?before_seq=4", alice, nil)
		if len(arr(t, page["messages"])) != 0 || page["has_more"] != false {
			t.Fatalf("page below the cleared messages: %s", show(page))
		}
	})
}

// TestRecall covers POST /v1/messages/recall and the recall op (PROTOCOL section 6).
func TestRecall(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk))
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	ack := n.ok(t, "POST", "/v1/messages", alice, map[string]any{
		"conv_id": convID, "client_msg_id": "secret", "content_type": 1, "content": "oops", "extra": map[string]string{"k": "v"},
	})
	n.send(t, alice, convID, "keep")
	aliceWS, bobWS := n.dial(t, alice, -1), n.dial(t, bob, -1)
	aliceWS.ping()
	bobWS.ping()
	recall := map[string]any{"conv_id": convID, "seq": 1}

	t.Run("only the sender", func(t *testing.T) {
		n.fail(t, http.StatusForbidden, "POST", "/v1/messages/recall", bob, recall)
		r := bobWS.do("recall", recall)
		wantFields(t, "bob's recall reply", r, map[string]any{"code": 403})
	})
	t.Run("unknown seq", func(t *testing.T) {
		n.fail(t, http.StatusNotFound, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": convID, "seq": 9})
	})
	t.Run("recall", func(t *testing.T) {
		n.ok(t, "POST", "/v1/messages/recall", alice, recall)
		for name, ws := range map[string]*wsClient{"alice": aliceWS, "bob": bobWS} {
			ev := ws.event()
			wantFields(t, name+"'s recall push", ev, map[string]any{"type": "recall", "conv_id": convID})
			wantKeys(t, "recall data", obj(t, ev["data"]), "seq", "msg_id", "sender_id")
			wantFields(t, "recall data", obj(t, ev["data"]), map[string]any{"seq": 1, "msg_id": ack["msg_id"], "sender_id": "alice"})
		}
	})
	wantRecalled := func(t *testing.T, what string, m map[string]any) {
		t.Helper()
		wantKeys(t, what, m, messageKeys...)
		wantFields(t, what, m, map[string]any{
			"seq": 1, "msg_id": ack["msg_id"], "sender_id": "alice", "client_msg_id": "secret",
			"content": nil, "extra": nil, "recalled": true,
		})
	}
	t.Run("history and later sync show it recalled", func(t *testing.T) {
		for name, tok := range map[string]string{"alice": alice, "bob": bob} {
			h := n.history(t, tok, convID, 0)
			wantRecalled(t, name+"'s history", h[0])
			wantFields(t, name+"'s other message", h[1], map[string]any{"recalled": false, "content": map[string]any{"text": "keep"}})
			for _, ev := range n.events(t, tok, 0) {
				if ev["type"] == "message" && num(obj(t, ev["data"])["seq"]) == 1 {
					wantRecalled(t, name+"'s replayed message event", obj(t, ev["data"]))
				}
			}
			snap := obj(t, n.ok(t, "GET", "/v1/sync/snapshot", tok, nil)["messages"])
			wantRecalled(t, name+"'s snapshot", arr(t, snap[convID])[0])
		}
		// A fresh connection catching up from 0 sees it recalled too.
		ws := n.dial(t, n.Token(t, "bob", "fresh"), 0)
		for {
			ev := ws.event()
			if ev["type"] == "message" {
				wantRecalled(t, "caught-up message event", obj(t, ev["data"]))
				break
			}
		}
	})
	t.Run("twice is a success", func(t *testing.T) {
		n.ok(t, "POST", "/v1/messages/recall", alice, recall)
		r := aliceWS.do("recall", recall)
		wantKeys(t, "recall reply", r, "id", "code")
		wantFields(t, "recall reply", r, map[string]any{"code": 0})
	})
	t.Run("over the websocket", func(t *testing.T) {
		r := aliceWS.do("recall", map[string]any{"conv_id": convID, "seq": 2})
		wantKeys(t, "recall reply", r, "id", "code")
		wantFields(t, "recall reply", r, map[string]any{"code": 0})
		m := n.history(t, bob, convID, 1)[0]
		wantFields(t, "ws-recalled message", m, map[string]any{"recalled": true, "content": nil})
	})
	t.Run("after the window", func(t *testing.T) {
		late := n.send(t, alice, convID, "late")
		clk.advance(24*time.Hour + time.Minute)
		fresh := n.Token(t, "alice", "d3")
		n.fail(t, http.StatusForbidden, "POST", "/v1/messages/recall", fresh, map[string]any{"conv_id": convID, "seq": late["seq"]})
		// An already recalled message stays a success to recall again.
		n.ok(t, "POST", "/v1/messages/recall", fresh, recall)
	})
}
