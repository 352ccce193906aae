package e2e

import (
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"net/http"
	"strconv"
	"testing"

	"github.com/parleychat/parley/internal/server"
)

// TestAttackLongPollFlood: one token opening 100 concurrent long-polls leaves one waiting
// (each new one ends the device's previous one, which answers 200 with no events); a user's
// devices past the per-user cap get 429 with Retry-After; the waiting-long-polls metric
// agrees throughout, and other users' sends stay fast.
func TestAttackLongPollFlood(t *testing.T) {
	parleytest.OneNode(t, "it reads one node's metrics, and long-poll bounds are per node")
	const perUser = 4
	n := start(t, func(c *server.Config) { c.Gateway.LongPollsPerUser = perUser })
	by := newBystander(t, n, "by")
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	convID := n.direct(t, bob, "alice")["conv_id"].(string)
	cursor := n.latest(t, alice)
	path := fmt.Sprintf("/v1/sync?cursor=%d&wait=30", cursor)
	base := by.baseline(t)

	const polls = 100
	flood := make(chan pollResult, polls)
	for range polls {
		go func() {
			r, err := n.request("GET", path, alice, nil)
			flood <- pollResult{r, err}
		}()
	}
	by.unaffected(t, "100 long-polls of one device", base)
	for range polls - 1 { // all but the newest answer at once, 200 with no events
		resp := awaitPoll(t, flood, deadline)
		if evs := arr(t, resp["events"]); len(evs) != 0 || num(resp["cursor"]) != cursor {
			t.Fatalf("an ended long-poll answered %s, want no events at cursor %d", show(resp), cursor)
		}
	}
	eventually(t, "one long-poll waiting", func() bool { return n.metric(t, "parley_longpolls_waiting") == 1 })

	var others []<-chan pollResult
	for i := 2; i <= perUser; i++ {
		others = append(others, longPoll(t, n, n.Token(t, "alice", "d"+strconv.Itoa(i)), cursor, 30))
	}
	if got := n.metric(t, "parley_longpolls_waiting"); got != perUser {
		t.Fatalf("parley_longpolls_waiting = %v with %d devices waiting", got, perUser)
	}
	r := n.fail(t, http.StatusTooManyRequests, "GET", path, n.Token(t, "alice", "one-too-many"), nil)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("429 with Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}

	ack := n.send(t, bob, convID, "wake-all") // the survivors still wait, and all wake
	for _, ch := range append(others, flood) {
		evs := arr(t, awaitPoll(t, ch, deadline)["events"])
		if len(evs) != 1 || obj(t, evs[0]["data"])["msg_id"] != ack["msg_id"] {
			t.Fatalf("woken long-poll got %s, want the one message", show(evs))
		}
	}
	eventually(t, "no long-poll waiting", func() bool { return n.metric(t, "parley_longpolls_waiting") == 0 })
}
