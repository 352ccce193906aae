package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// pollResult is the answer to one long-poll.
type pollResult struct {
	r   response
	err error
}

// longPoll starts GET /v1/sync?cursor=cursor&wait=wait (and the further parameters of
// more, such as "&mark=3") in a goroutine and waits until the node counts it as waiting, so
// that what the test does next happens during the wait.
func longPoll(t *testing.T, n *node, token string, cursor int64, wait int, more ...string) <-chan pollResult {
	t.Helper()
	waiting := n.metric(t, "parley_longpolls_waiting")
	out := make(chan pollResult, 1)
	path := fmt.Sprintf("/v1/sync?cursor=%d&wait=%d", cursor, wait) + strings.Join(more, "")
	go func() {
		r, err := n.request("GET", path, token, nil)
		out <- pollResult{r, err}
	}()
	eventually(t, "the long-poll to wait", func() bool { return n.metric(t, "parley_longpolls_waiting") > waiting })
	return out
}

// awaitPoll waits for a long-poll's answer, which must come well before its wait ends.
func awaitPoll(t *testing.T, ch <-chan pollResult, within time.Duration) map[string]any {
	t.Helper()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.r.status != http.StatusOK {
			t.Fatalf("long-poll answered %d %s", res.r.status, res.r.raw)
		}
		m := object(t, res.r.raw)
		keys := []string{"cursor", "events", "has_more", "mark"}
		if _, ok := m["conversations"]; ok { // read-fanout conversations changed since the mark
			keys = append(keys, "conversations")
		}
		wantKeys(t, "SyncResponse", m, keys...)
		return m
	case <-time.After(within):
		t.Fatalf("long-poll still waiting after %v", within)
	}
	return nil
}

// TestLongPoll: a waiting sync returns as soon as an event commits.
func TestLongPoll(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	cursor := n.latest(t, bob)

	t.Run("wakes on commit", func(t *testing.T) {
		ch := longPoll(t, n, bob, cursor, 10)
		ack := n.send(t, alice, convID, "wake-up")
		resp := awaitPoll(t, ch, 5*time.Second) // well under the 10 s wait
		evs := arr(t, resp["events"])
		if len(evs) != 1 || num(resp["cursor"]) != cursor+1 {
			t.Fatalf("long-poll answer %s, want the one new event", show(resp))
		}
		wantFields(t, "woken event", evs[0], map[string]any{"cursor": cursor + 1, "type": "message", "conv_id": convID})
		wantFields(t, "woken message", obj(t, evs[0]["data"]), map[string]any{"msg_id": ack["msg_id"]})
	})
	t.Run("answers at once when events exist", func(t *testing.T) {
		r := n.call(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d&wait=10", cursor), bob, nil)
		if r.status != http.StatusOK || len(arr(t, object(t, r.raw)["events"])) != 1 {
			t.Fatalf("long-poll behind the log: %d %s", r.status, r.raw)
		}
	})
	t.Run("other users' events do not wake it", func(t *testing.T) {
		ch := longPoll(t, n, bob, cursor+1, 10)
		carol := n.user(t, "carol")
		n.direct(t, carol, "alice")             // events for carol and alice only
		ack := n.send(t, alice, convID, "late") // then one for bob
		resp := awaitPoll(t, ch, 5*time.Second)
		evs := arr(t, resp["events"])
		if len(evs) != 1 || obj(t, evs[0]["data"])["msg_id"] != ack["msg_id"] {
			t.Fatalf("long-poll answer %s, want only bob's new message", show(resp))
		}
	})
}

// TestDrain is SIGTERM as parleytest.Stop runs it: open WebSockets are closed with 1001,
// and a waiting long-poll is answered with no events.
func TestDrain(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.direct(t, alice, "bob")
	cursor := n.latest(t, bob)
	ws := n.dial(t, alice, -1)
	ws.ping()
	ch := longPoll(t, n, bob, cursor, 10)

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.Stop(t)
	}()
	if code := ws.closed(); code != websocket.CloseGoingAway {
		t.Fatalf("WebSocket closed with %d at shutdown, want 1001", code)
	}
	resp := awaitPoll(t, ch, 5*time.Second)
	if evs := arr(t, resp["events"]); len(evs) != 0 || num(resp["cursor"]) != cursor || resp["has_more"] != false {
		t.Fatalf("long-poll answered %s at shutdown, want no events and cursor %d", show(resp), cursor)
	}
	select {
	case <-stopped:
	case <-time.After(deadline):
		t.Fatal("the node did not finish draining")
	}
}
