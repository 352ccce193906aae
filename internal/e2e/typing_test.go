package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// Typing indicators (docs/protocol.md section 9.10): never stored, rate-limited per device
// and conversation, expired after 6 s, and in read-fanout groups coalesced and pushed only
// to the connections that have the conversation open.

var (
	typingKeys     = []string{"op", "conv_id", "user_id", "state", "expires_in_ms"}
	roomTypingKeys = append(slices.Clone(typingKeys), "typers", "count")
)

// typing sends a typing op and returns whether the server forwarded it; it fails the test
// on an error reply.
func (c *wsClient) typing(convID, state string) bool {
	c.t.Helper()
	r := c.do("typing", map[string]any{"conv_id": convID, "state": state})
	if num(r["code"]) != 0 {
		c.t.Fatalf("typing %s: %s", state, show(r))
	}
	wantKeys(c.t, "typing reply", r, "id", "code", "forwarded")
	return r["forwarded"] == true
}

// typingPush waits for c's next typing push, skipping events and notices.
func (c *wsClient) typingPush() map[string]any {
	c.t.Helper()
	for {
		if p := c.push(); p["op"] == "typing" {
			return p
		} else if p["op"] != "event" && p["op"] != "notice" && p["op"] != "message" {
			c.t.Fatalf("push %s, want a typing push", show(p))
		}
	}
}

// noTypingBefore fails if c got a typing push before the event of the message
// clientMsgID, which every connection of the test's users gets after anything queued
// before it (a connection's pushes are in order).
func (c *wsClient) noTypingBefore(clientMsgID string) {
	c.t.Helper()
	for {
		p := c.push()
		switch p["op"] {
		case "typing":
			c.t.Fatalf("typing push %s to a connection that must not get one", show(p))
		case "event":
			if d, ok := obj(c.t, p["event"])["data"].(map[string]any); ok && d["client_msg_id"] == clientMsgID {
				return
			}
		case "notice", "message":
			if p["op"] == "message" && obj(c.t, p["message"])["client_msg_id"] == clientMsgID {
				return
			}
			if p["op"] == "notice" {
				return // the notice of the message (a connection without the conversation open)
			}
		}
	}
}

// TestTypingDirect: a member's typing reaches the other member's connections, not the
// typer's own other device, and is stopped when the typer's connection ends; a second "started" within 3 s is dropped, a "stopped" after a
// "started" always goes through, and a "stopped" with nothing standing is dropped; after
// 3 s (the node's clock) a "started" goes through again, and one older than 6 s needs no
// "stopped".
func TestTypingDirect(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk))
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	aliceTablet := n.Token(t, "alice", "tablet")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)

	aliceWS, tabletWS, bobWS := n.dial(t, alice, -1), n.dial(t, aliceTablet, -1), n.dial(t, bob, -1)
	if !aliceWS.typing(convID, "started") {
		t.Fatal("the first started was dropped")
	}
	p := bobWS.typingPush()
	wantKeys(t, "typing push", p, typingKeys...)
	wantFields(t, "typing push", p, map[string]any{"conv_id": convID, "user_id": "alice", "state": "started", "expires_in_ms": 6000})

	if aliceWS.typing(convID, "started") {
		t.Fatal("a second started within 3 s was forwarded")
	}
	if !aliceWS.typing(convID, "stopped") {
		t.Fatal("the stopped after a started was dropped")
	}
	p = bobWS.typingPush()
	wantFields(t, "typing push", p, map[string]any{"user_id": "alice", "state": "stopped", "expires_in_ms": 0})
	if aliceWS.typing(convID, "stopped") {
		t.Fatal("a stopped with nothing standing was forwarded")
	}
	if aliceWS.typing(convID, "started") {
		t.Fatal("a started within 3 s of the last, after a stopped, was forwarded")
	}

	clk.advance(3 * time.Second)
	if !aliceWS.typing(convID, "started") {
		t.Fatal("a started 3 s after the last was dropped")
	}
	wantFields(t, "typing push", bobWS.typingPush(), map[string]any{"state": "started"})
	clk.advance(6 * time.Second)
	if aliceWS.typing(convID, "stopped") {
		t.Fatal("a stopped 6 s after its started (expired already) was forwarded")
	}

	// Never stored: the log has no typing event; and alice's tablet got none of it.
	for _, ev := range n.events(t, bob, 0) {
		if ev["type"] == "typing" {
			t.Fatalf("a typing event in the log: %s", show(ev))
		}
	}
	n.send(t, alice, convID, "after-typing")
	tabletWS.noTypingBefore("after-typing")

	// A connection that ends while typing stops it for the peers.
	if !tabletWS.typing(convID, "started") {
		t.Fatal("the tablet's started was dropped")
	}
	wantFields(t, "typing push", bobWS.typingPush(), map[string]any{"user_id": "alice", "state": "started"})
	tabletWS.conn.Close()
	wantFields(t, "typing push after the typer's connection ended", bobWS.typingPush(), map[string]any{"user_id": "alice", "state": "stopped"})
}

// TestTypingRefused: a non-member, an unknown conversation and a malformed frame get the
// error replies the other ops give.
func TestTypingRefused(t *testing.T) {
	n := start(t)
	alice, carol := n.user(t, "alice"), n.user(t, "carol")
	n.user(t, "bob")
	convID := n.direct(t, alice, "bob")["conv_id"].(string)
	carolWS := n.dial(t, carol, -1)
	read := carolWS.do("read", map[string]any{"conv_id": convID, "seq": 1})
	for _, tc := range []struct {
		name   string
		params map[string]any
		want   int64
	}{
		{"non-member", map[string]any{"conv_id": convID, "state": "started"}, 404},
		{"non-member stopped", map[string]any{"conv_id": convID, "state": "stopped"}, 404},
		{"unknown conversation", map[string]any{"conv_id": "g_doesnotexist0000", "state": "started"}, 404},
		{"bad state", map[string]any{"conv_id": convID, "state": "typing"}, 400},
		{"no conv_id", map[string]any{"state": "started"}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := carolWS.do("typing", tc.params)
			wantKeys(t, "error reply", r, "id", "code", "error")
			if num(r["code"]) != tc.want {
				t.Fatalf("reply %s, want %d", show(r), tc.want)
			}
			if tc.want == 404 && r["error"] != read["error"] {
				t.Fatalf("404 %q, want the read op's %q", r["error"], read["error"])
			}
		})
	}
}

// readFanoutGroup makes a read-fanout group of alice and users (the node has
// --write-fanout-max 2).
func readFanoutGroup(t *testing.T, n *node, alice string, users ...string) string {
	t.Helper()
	g := n.group(t, alice, "all hands", false, users...)
	if g["fanout"] != "read" {
		t.Fatalf("group %s is not read fanout", show(g))
	}
	return g["conv_id"].(string)
}

// TestTypingReadFanout: in a read-fanout group the typers' set reaches only the
// connections that have the conversation open, names at most 5 typers (the earliest) with
// the count of all, comes at most once a second per connection however many type, and
// is expired by the server 6 s after a typer's last "started".
func TestTypingReadFanout(t *testing.T) {
	clk := &clock{}
	n := start(t, withClock(clk), func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.RequestRate = 0
		c.Gateway.ConvCreateEvery = 0
	})
	alice := n.user(t, "alice")
	const typers = 30
	names := make([]string, typers)
	tokens := make([]string, typers)
	for i := range names {
		names[i] = fmt.Sprintf("typer%02d", i)
		tokens[i] = n.user(t, names[i])
	}
	bob, carol := n.user(t, "bob"), n.user(t, "carol")
	convID := readFanoutGroup(t, n, alice, append(names, "bob", "carol")...)

	bobWS, carolWS := n.dial(t, bob, -1), n.dial(t, carol, -1) // both follow the room
	bobWS.do("open", map[string]any{"conv_id": convID})
	ws := make([]*wsClient, typers)
	for i := range ws {
		ws[i] = n.dial(t, tokens[i], -1)
	}

	// The first typer alone: one frame, at once.
	if !ws[0].typing(convID, "started") {
		t.Fatal("started dropped")
	}
	p := bobWS.typingPush()
	wantKeys(t, "room typing push", p, roomTypingKeys...)
	wantFields(t, "room typing push", p, map[string]any{"conv_id": convID, "user_id": names[0], "state": "started", "typers": []any{names[0]}})
	if e := num(p["expires_in_ms"]); e <= 0 || e > 6000 {
		t.Fatalf("expires_in_ms %d, want 1-6000", e)
	}

	// All the others at once, from their own goroutines.
	var wg sync.WaitGroup
	for i := 1; i < typers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := ws[i].tryDo("typing", map[string]any{"conv_id": convID, "state": "started"}); err != nil || r["forwarded"] != true {
				t.Errorf("typer %d: %v %s", i, err, show(r))
			}
		}()
	}
	wg.Wait()
	var at []time.Time
	for {
		p = bobWS.typingPush()
		at = append(at, time.Now())
		if num(p["count"]) == typers {
			break
		}
	}
	got, _ := p["typers"].([]any)
	if len(got) != 5 || got[0] != any(names[0]) {
		t.Fatalf("typers %s, want 5, %s first", show(got), names[0])
	}
	// The set changed 30 times within far less than a second: one or two pushes.
	if len(at) > 2 {
		t.Fatalf("%d pushes for one burst of 29 typers, want at most 2", len(at))
	}

	// carol, without the conversation open, got none of it.
	n.send(t, alice, convID, "after-typing")
	carolWS.noTypingBefore("after-typing")

	// The server expires them: 7 s later by the node's clock, a push of an empty set.
	clk.advance(7 * time.Second)
	for {
		p = bobWS.typingPush()
		if ts, ok := p["typers"].([]any); ok && len(ts) == 0 {
			break
		}
	}
	if num(p["count"]) != 0 || p["state"] != "stopped" {
		t.Fatalf("after expiry %s", show(p))
	}
}

// TestTypingOnePushPerSecond: with many members typing on and off for a few seconds, each
// open connection gets at most one typing push per second (the gaps between pushes, as the
// client sees them, allowing 100 ms of scheduling jitter).
func TestTypingOnePushPerSecond(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3 s")
	}
	n := start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.RequestRate = 0
		c.Gateway.ConvCreateEvery = 0
	})
	alice := n.user(t, "alice")
	const typers, openers = 20, 5
	var users []string
	tokens := make([]string, typers+openers)
	for i := range tokens {
		u := fmt.Sprintf("u%02d", i)
		users = append(users, u)
		tokens[i] = n.user(t, u)
	}
	convID := readFanoutGroup(t, n, alice, users...)
	gaps := make([]chan []time.Duration, openers)
	stop := make(chan struct{})
	for i := range openers {
		c := n.dial(t, tokens[typers+i], -1)
		c.do("open", map[string]any{"conv_id": convID})
		gaps[i] = make(chan []time.Duration, 1)
		go func() { // the arrival times, read as they come
			var got []time.Duration
			var last time.Time
			defer func() { gaps[i] <- got }()
			for {
				select {
				case p := <-c.pushes:
					if p["op"] != "typing" {
						continue
					}
					now := time.Now()
					if !last.IsZero() {
						got = append(got, now.Sub(last))
					}
					last = now
				case <-stop:
					return
				}
			}
		}()
	}
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := range typers {
		c := n.dial(t, tokens[i], -1)
		wg.Add(1)
		go func() { // started, stopped, started... as fast as the replies come
			defer wg.Done()
			for k := 0; time.Now().Before(end); k++ {
				state := "started"
				if k%2 == 1 {
					state = "stopped"
				}
				if _, err := c.tryDo("typing", map[string]any{"conv_id": convID, "state": state}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	for i := range gaps {
		got := <-gaps[i]
		if len(got) < 1 {
			t.Fatalf("connection %d got %d typing pushes in 3 s of typing", i, len(got)+1)
		}
		for _, g := range got {
			if g < 900*time.Millisecond {
				t.Fatalf("connection %d: typing pushes %v apart (all gaps %v)", i, g, got)
			}
		}
	}
}

// TestNodesTyping: on three nodes, alice types on node A and bob's connection on node B
// gets it (direct); in a read-fanout group dave types on node C, and bob, who has the group
// open on B, gets the set, while carol on A, who has not opened it, gets nothing.
func TestNodesTyping(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 3, newBus, func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
		a, b, c := ns[0], ns[1], ns[2]
		alice, bob, carol, dave := a.user(t, "alice"), a.user(t, "bob"), a.user(t, "carol"), a.user(t, "dave")
		direct := a.direct(t, alice, "bob")["conv_id"].(string)
		group := readFanoutGroup(t, a, alice, "bob", "carol", "dave")

		bobWS, aliceWS := b.dial(t, bob, -1), a.dial(t, alice, -1)
		if !aliceWS.typing(direct, "started") {
			t.Fatal("started dropped")
		}
		p := bobWS.typingPush()
		wantKeys(t, "typing push from another node", p, typingKeys...)
		wantFields(t, "typing push from another node", p, map[string]any{"conv_id": direct, "user_id": "alice", "state": "started", "expires_in_ms": 6000})

		bobWS.do("open", map[string]any{"conv_id": group})
		carolWS, daveWS := a.dial(t, carol, -1), c.dial(t, dave, -1)
		if !daveWS.typing(group, "started") {
			t.Fatal("started dropped")
		}
		p = bobWS.typingPush()
		wantKeys(t, "room typing push from another node", p, roomTypingKeys...)
		wantFields(t, "room typing push from another node", p, map[string]any{"conv_id": group, "user_id": "dave", "state": "started", "typers": []any{"dave"}, "count": 1})
		if !daveWS.typing(group, "stopped") {
			t.Fatal("stopped dropped")
		}
		p = bobWS.typingPush()
		wantFields(t, "room typing push from another node", p, map[string]any{"user_id": "dave", "state": "stopped", "typers": []any{}, "count": 0})
		c.send(t, dave, group, "after-typing")
		carolWS.noTypingBefore("after-typing")
	})
}
