package e2e

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// pipeline writes a send frame for each of frames (params beside "id" p<i> and "op"
// "send") without waiting for any reply, then a ping, and returns the replies to the sends
// in the order they came, and the ping's. They must come in frame order, the ping's last.
func pipeline(t *testing.T, ws *wsClient, frames []map[string]any) (replies []map[string]any, pong map[string]any) {
	t.Helper()
	for i, params := range frames {
		frame := map[string]any{"id": fmt.Sprint("p", i), "op": "send"}
		maps.Copy(frame, params)
		ws.write(frame)
	}
	ws.write(map[string]any{"id": "last", "op": "ping"})
	replies = make([]map[string]any, len(frames))
	for i := range replies {
		replies[i] = ws.reply()
		if want := fmt.Sprint("p", i); replies[i]["id"] != want {
			t.Fatalf("reply %d is %s, want the reply to frame %s: replies come in frame order", i, show(replies[i]), want)
		}
	}
	pong = ws.reply()
	if pong["id"] != "last" {
		t.Fatalf("reply %s after the sends', want the ping's", show(pong))
	}
	return replies, pong
}

// TestWSPipelinedSends: 50 send frames written back to back on one connection, with a
// retry of an earlier client_msg_id, an invalid frame and a send to a conversation that
// does not exist among them, all in flight together. Every frame gets its reply, in frame
// order; the new messages get strictly increasing, gapless seqs in frame order; the retry
// gets the original ack; the two refusals get their error replies and disturb nothing;
// and the conversation's history holds the messages in the order they were sent.
func TestWSPipelinedSends(t *testing.T) {
	n := start(t)
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	const burst, retried, retry, invalid, stranger = 50, 10, 20, 30, 40
	frames := make([]map[string]any, burst)
	for i := range frames {
		frames[i] = textMessage(convID, fmt.Sprint("pipe-", i))
	}
	frames[retry] = textMessage(convID, fmt.Sprint("pipe-", retried))
	delete(frames[invalid], "content")
	frames[stranger]["conv_id"] = "d_aaaaaaaaaaaaaaaaaaaaaaaaaa"

	ws := n.dial(t, alice, -1)
	commits := n.metric(t, "parley_store_commit_batch_size_count")
	replies, pong := pipeline(t, ws, frames)
	t.Logf("%d sends in %.0f commits", burst, n.metric(t, "parley_store_commit_batch_size_count")-commits)
	wantFields(t, "the ping after the burst", pong, map[string]any{"code": 0, "op": "pong"})

	wantFields(t, "the invalid frame's reply", replies[invalid], map[string]any{"code": 400})
	wantFields(t, "the reply to a send to no conversation", replies[stranger], map[string]any{"code": 404})
	wantKeys(t, "the retry's ack", replies[retry], append([]string{"id"}, ackKeys...)...)
	if a, b := without(replies[retry], "id", "duplicate"), without(replies[retried], "id", "duplicate"); !maps.Equal(a, b) {
		t.Fatalf("the retry's ack %s, want the original's %s", show(replies[retry]), show(replies[retried]))
	}
	var order []string // client_msg_ids of the new messages, in frame order
	for i, r := range replies {
		if i == retry || i == invalid || i == stranger {
			continue
		}
		seq := int64(len(order) + 1)
		wantKeys(t, fmt.Sprint("ack ", i), r, append([]string{"id"}, ackKeys...)...)
		wantFields(t, fmt.Sprint("ack ", i), r, map[string]any{
			"code": 0, "conv_id": convID, "client_msg_id": fmt.Sprint("pipe-", i), "seq": seq, "duplicate": false,
		})
		order = append(order, fmt.Sprint("pipe-", i))
	}
	wantFields(t, "the retry's ack", replies[retry], map[string]any{"duplicate": true})
	if len(order) != burst-3 {
		t.Fatalf("%d new messages, want %d", len(order), burst-3)
	}
	for i, m := range n.history(t, bob, convID, 0) {
		if m["client_msg_id"] != order[i] || num(m["seq"]) != int64(i+1) {
			t.Fatalf("bob's history holds %s at seq %d, want %s", m["client_msg_id"], num(m["seq"]), order[i])
		}
	}
}

// without returns a copy of r without keys.
func without(r map[string]any, keys ...string) map[string]any {
	out := maps.Clone(r)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// TestFanoutLimitPipelinedSends: the events limit still holds, to the documented degree,
// for sends in flight together. Of 100 sends pipelined into a 20-member group with a
// budget of 30 events, the ones served create at most the budget, its refill and the
// events of the sends in flight at once (32 of 20 events each), and the rest get 429.
func TestFanoutLimitPipelinedSends(t *testing.T) {
	const rate, burst, size, sends, inFlight = 10, 50, 20, 100, 32
	n := start(t, func(c *server.Config) { c.Gateway.FanoutRate, c.Gateway.FanoutBurst = rate, burst })
	owner, convID := bigGroup(t, n, size) // the creation took 20 of the 50
	ws := n.dial(t, owner, -1)
	frames := make([]map[string]any, sends)
	for i := range frames {
		frames[i] = textMessage(convID, fmt.Sprint("burst-", i))
	}
	began := time.Now()
	replies, pong := pipeline(t, ws, frames)
	elapsed := time.Since(began)
	wantFields(t, "the ping after the burst, in debt", pong, map[string]any{"code": 429})
	served, refused := 0, 0
	for _, r := range replies {
		switch num(r["code"]) {
		case 0:
			served++
		case 429:
			refused++
		default:
			t.Fatalf("reply %s, want an ack or 429", show(r))
		}
	}
	budget := float64(burst-size) + rate*elapsed.Seconds() + inFlight*size
	if float64(served*size) > budget || refused == 0 {
		t.Fatalf("%d sends served (%d events) and %d refused in %v; want at most %.0f events and some refused",
			served, served*size, refused, elapsed, budget)
	}
	t.Logf("%d of %d pipelined sends served in %v", served, sends, elapsed)
}
