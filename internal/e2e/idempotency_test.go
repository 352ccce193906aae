package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// sendVia is one way of sending a message: over HTTP, or as a WebSocket send op.
type sendVia func(t *testing.T, msg map[string]any) map[string]any

// checkSameAck checks that acks all name one message, exactly one of them the original.
func checkSameAck(t *testing.T, acks []map[string]any) {
	t.Helper()
	originals := 0
	for _, a := range acks {
		if num(a["code"]) != 0 {
			t.Fatalf("ack %s", show(a))
		}
		for _, k := range []string{"conv_id", "client_msg_id", "msg_id", "seq", "created_at"} {
			if show(a[k]) != show(acks[0][k]) {
				t.Fatalf("acks differ in %s: %s vs %s", k, show(a), show(acks[0]))
			}
		}
		switch a["duplicate"] {
		case false:
			originals++
		case true:
		default:
			t.Fatalf("duplicate %v, want a boolean", a["duplicate"])
		}
	}
	if originals != 1 {
		t.Fatalf("%d of %d acks have duplicate false, want exactly 1\n%s", originals, len(acks), show(acks))
	}
}

// TestIdempotency covers PROTOCOL section 6: a repeated (sender, client_msg_id) creates
// nothing and returns the original ack with duplicate true, whatever its content, over
// HTTP and WebSocket, sequentially and racing.
func TestIdempotency(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	alice2 := n.Token(t, "alice", "d2")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	ws := n.dial(t, alice2, -1)

	viaHTTP := func(t *testing.T, msg map[string]any) map[string]any {
		return n.ok(t, "POST", "/v1/messages", alice, msg)
	}
	viaWS := func(t *testing.T, msg map[string]any) map[string]any {
		t.Helper()
		r := ws.do("send", msg)
		wantKeys(t, "websocket ack", r, append([]string{"id"}, ackKeys...)...)
		delete(r, "id")
		return r
	}
	msg := func(clientMsgID string, content any) map[string]any {
		return map[string]any{"conv_id": convID, "client_msg_id": clientMsgID, "content_type": 1, "content": content}
	}
	maxSeq := func() int64 { return num(n.brief(t, bob, convID)["max_seq"]) }

	cases := []struct {
		name          string
		first, second sendVia
	}{
		{"http twice", viaHTTP, viaHTTP},
		{"websocket twice", viaWS, viaWS},
		{"http then websocket from another device", viaHTTP, viaWS},
		{"websocket then http from another device", viaWS, viaHTTP},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("seq-%d", i)
			before := maxSeq()
			a1 := c.first(t, msg(id, "original"))
			a2 := c.second(t, msg(id, map[string]any{"different": true}))
			wantKeys(t, "ack", a1, ackKeys...)
			wantKeys(t, "ack", a2, ackKeys...)
			wantFields(t, "first ack", a1, map[string]any{"duplicate": false, "seq": before + 1})
			checkSameAck(t, []map[string]any{a1, a2})
			if got := maxSeq(); got != before+1 {
				t.Fatalf("max_seq %d after a repeated send, want %d", got, before+1)
			}
			h := n.history(t, bob, convID, before)
			if len(h) != 1 || h[0]["content"] != "original" {
				t.Fatalf("stored %s, want the original content only", show(h))
			}
		})
	}

	// A client_msg_id reused in another conversation is not a retry: the original ack would
	// name the first conversation and the client would believe its new message stored. It is
	// a 409 over both transports, stores nothing, and a true retry still gets the ack.
	t.Run("another conversation, same client_msg_id", func(t *testing.T) {
		n.user(t, "carol")
		other := n.direct(t, alice, "carol")["conv_id"].(string)
		a1 := viaHTTP(t, msg("cross", "first"))
		m := msg("cross", "second")
		m["conv_id"] = other
		r := n.fail(t, http.StatusConflict, "POST", "/v1/messages", alice, m)
		if e := object(t, r.raw)["error"].(string); !strings.Contains(e, "already used in another conversation") {
			t.Fatalf("409 reason %q does not say the id was used in another conversation", e)
		}
		reply := ws.do("send", m)
		wantFields(t, "websocket reuse", reply, map[string]any{"code": http.StatusConflict})
		if got := num(n.brief(t, alice, other)["max_seq"]); got != 0 {
			t.Fatalf("the reuse created a message in the other conversation (max_seq %d)", got)
		}
		checkSameAck(t, []map[string]any{a1, viaHTTP(t, msg("cross", "retry"))})
	})
	t.Run("another sender, same client_msg_id", func(t *testing.T) {
		a1 := viaHTTP(t, msg("mine", "alice's"))
		a2 := n.ok(t, "POST", "/v1/messages", bob, msg("mine", "bob's"))
		if a2["duplicate"] != false || a2["msg_id"] == a1["msg_id"] {
			t.Fatalf("bob's send deduplicated against alice's: %s", show(a2))
		}
	})

	const racers = 8
	race := func(t *testing.T, send func(i int) (map[string]any, error)) {
		t.Helper()
		before := maxSeq()
		acks := make([]map[string]any, racers)
		errs := make([]error, racers)
		startLine := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startLine
				acks[i], errs[i] = send(i)
			}()
		}
		close(startLine)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		checkSameAck(t, acks)
		if got := maxSeq(); got != before+1 {
			t.Fatalf("max_seq %d after %d racing sends of one client_msg_id, want %d", got, racers, before+1)
		}
	}
	t.Run("racing over http", func(t *testing.T) {
		race(t, func(i int) (map[string]any, error) {
			r, err := n.request("POST", "/v1/messages", alice, msg("race-http", i))
			if err != nil {
				return nil, err
			}
			if r.status != http.StatusOK {
				return nil, fmt.Errorf("send: %d %s", r.status, r.raw)
			}
			return decode(r.raw)
		})
	})
	t.Run("racing over http and websockets", func(t *testing.T) {
		// Each racer is its own device: odd ones on a WebSocket, even ones over HTTP.
		conns := make([]*wsClient, racers)
		toks := make([]string, racers)
		for i := range racers {
			toks[i] = n.Token(t, "alice", fmt.Sprintf("racer-%d", i))
			if i%2 == 1 {
				conns[i] = n.dial(t, toks[i], -1)
			}
		}
		race(t, func(i int) (map[string]any, error) {
			m := msg("race-mixed", i)
			if conns[i] != nil {
				return conns[i].tryDo("send", m)
			}
			r, err := n.request("POST", "/v1/messages", toks[i], m)
			if err != nil {
				return nil, err
			}
			if r.status != http.StatusOK {
				return nil, fmt.Errorf("send: %d %s", r.status, r.raw)
			}
			return decode(r.raw)
		})
	})
}
