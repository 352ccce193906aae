package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// fastPresence makes presence turn every 20 ms with a short grace and timeout, so that
// the tests wait on frames for a fraction of a second, not the defaults' minute.
func fastPresence(grace, coalesce time.Duration) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.Presence.Tick = 20 * time.Millisecond
		cfg.Presence.Grace = grace
		cfg.Presence.Timeout = 2 * time.Second
		cfg.Presence.Coalesce = coalesce
	}
}

// presencePush waits for the next push, which must be a presence frame, and returns the
// entry of user in it.
func presencePush(t testing.TB, c *wsClient, user string) map[string]any {
	t.Helper()
	p := c.push()
	if p["op"] != "presence" {
		t.Fatalf("push %s, want a presence frame", show(p))
	}
	for _, e := range arr(t, p["presence"]) {
		if e["user_id"] == user {
			return e
		}
	}
	t.Fatalf("presence frame %s has no %s", show(p), user)
	return nil
}

func wantState(t testing.TB, what string, e map[string]any, state string) {
	t.Helper()
	if e["state"] != state {
		t.Fatalf("%s: presence %s, want %s", what, show(e), state)
	}
}

// subscribe subscribes c to users and returns the answer's entries.
func subscribe(t testing.TB, c *wsClient, users ...string) []map[string]any {
	t.Helper()
	r := c.do("presence_subscribe", map[string]any{"users": users})
	if num(r["code"]) != 0 {
		t.Fatalf("presence_subscribe: %s", show(r))
	}
	return arr(t, r["presence"])
}

// presenceDevices runs the two-devices scenario with alice's devices on a and b and the
// watcher on w (the same node, or three).
func presenceDevices(t *testing.T, a, b, w *node) {
	alice, bob := a.user(t, "alice"), a.user(t, "bob")
	alice2 := a.Token(t, "alice", "d2")
	a.direct(t, bob, "alice")
	watcher := w.dial(t, bob, -1)
	got := subscribe(t, watcher, "alice")
	wantState(t, "before alice connects", got[0], "offline")

	d1 := a.dial(t, alice, -1)
	wantState(t, "d1 connected", presencePush(t, watcher, "alice"), "online")
	d2 := b.dial(t, alice2, -1)
	d1.do("presence_set", map[string]any{"state": "away"})
	d2.do("presence_set", map[string]any{"state": "away"})
	// Only once both say away is alice away: the next frame is that one, not an offline
	// or an away while d2 was active.
	wantState(t, "both away", presencePush(t, watcher, "alice"), "away")
	d2.do("presence_set", map[string]any{"state": "active"})
	wantState(t, "d2 active", presencePush(t, watcher, "alice"), "online")
	d1.conn.Close()
	d2.conn.Close()
	// The two closes race, on two nodes or two goroutines: when d2's is seen first alice
	// is away for a moment (only d1, which said away, is left), and that frame is right.
	// Anything else before the offline is not.
	e := presencePush(t, watcher, "alice")
	if e["state"] == "away" {
		e = presencePush(t, watcher, "alice")
	}
	wantState(t, "both gone, after the grace", e, "offline")
	if at, _ := e["last_active_at"].(string); at == "" || at[len(at)-3:] != "00Z" {
		t.Errorf("last_active_at %q, want a time to the minute", at)
	}
}

// TestPresenceDevices: a user is online while either device is connected, away only when
// both say so, offline once both left and the grace passed.
func TestPresenceDevices(t *testing.T) {
	n := start(t, fastPresence(100*time.Millisecond, time.Millisecond))
	presenceDevices(t, n, n, n)
}

// TestNodesPresenceDevices: the same, alice's devices on two nodes and the watcher on a
// third.
func TestNodesPresenceDevices(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 3, newBus, fastPresence(100*time.Millisecond, time.Millisecond))
		presenceDevices(t, ns[0], ns[1], ns[2])
	})
}

// TestPresenceGraceReconnect: a device that reconnects within the grace never shows its
// user offline: the frame after the reconnect is the next real change.
func TestPresenceGraceReconnect(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, fastPresence(time.Second, time.Millisecond))
		alice, bob := ns[0].user(t, "alice"), ns[0].user(t, "bob")
		ns[0].direct(t, bob, "alice")
		watcher := ns[1].dial(t, bob, -1)
		subscribe(t, watcher, "alice")
		d1 := ns[0].dial(t, alice, -1)
		wantState(t, "connected", presencePush(t, watcher, "alice"), "online")
		d1.conn.Close()
		d1 = ns[1].dial(t, alice, -1) // back, on the other node
		d1.do("presence_set", map[string]any{"state": "away"})
		wantState(t, "after the reconnect", presencePush(t, watcher, "alice"), "away")
	})
}

// watchAcross connects alice to ns[0] with bob, her direct contact, watching her from
// ns[1], once bob has seen her online; it returns their tokens and bob's connection.
func watchAcross(t *testing.T, ns []*node) (alice, bob string, watcher *wsClient) {
	t.Helper()
	alice, bob = ns[0].user(t, "alice"), ns[0].user(t, "bob")
	ns[0].direct(t, bob, "alice")
	watcher = ns[1].dial(t, bob, -1)
	subscribe(t, watcher, "alice")
	ns[0].dial(t, alice, -1)
	wantState(t, "connected", presencePush(t, watcher, "alice"), "online")
	return alice, bob, watcher
}

// TestNodesPresenceNodeDies: a node that goes silent without a goodbye (its bus cut, as
// when it is killed) takes its users offline within the timeout, for the other nodes.
func TestNodesPresenceNodeDies(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		var cut *lossyBus
		first := true
		ns := startNodes(t, 2, func(t *testing.T) bus.Bus {
			b := newBus(t)
			if first {
				first = false
				cut = &lossyBus{Bus: b}
				return cut
			}
			return b
		}, fastPresence(100*time.Millisecond, time.Millisecond))
		_, _, watcher := watchAcross(t, ns)
		cut.down.Store(true)
		began := time.Now()
		wantState(t, "node silent", presencePush(t, watcher, "alice"), "offline")
		if d := time.Since(began); d > 2*time.Second+time.Second {
			t.Errorf("offline after %v, want within the 2 s timeout (and a turn)", d)
		}
	})
}

// TestNodesPresenceHide: a user who hides their presence through one node goes offline,
// with no last_active_at, for a watcher on another node, in the frame and in GET
// /v1/presence there; showing it again brings them back online.
func TestNodesPresenceHide(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, fastPresence(100*time.Millisecond, time.Millisecond))
		alice, bob, watcher := watchAcross(t, ns)

		ns[0].ok(t, "PATCH", "/v1/me", alice, map[string]any{"presence": "hidden"})
		e := presencePush(t, watcher, "alice")
		wantState(t, "hidden on the other node", e, "offline")
		if _, ok := e["last_active_at"]; ok {
			t.Errorf("a hidden user's frame: %s, want no last_active_at", show(e))
		}
		got := arr(t, ns[1].ok(t, "GET", "/v1/presence?users=alice", bob, nil)["presence"])
		if len(got) != 1 || got[0]["state"] != "offline" || got[0]["last_active_at"] != nil {
			t.Errorf("GET /v1/presence on the other node: %s, want alice offline, no last_active_at", show(got))
		}

		ns[0].ok(t, "PATCH", "/v1/me", alice, map[string]any{"presence": "visible"})
		wantState(t, "shown again", presencePush(t, watcher, "alice"), "online")
	})
}

// TestPresenceNoOracle: asking about a user one shares no conversation with answers the
// same bytes as asking about a user who hides their presence.
func TestPresenceNoOracle(t *testing.T) {
	parleytest.OneNode(t, "it compares the bytes of answers that a balancer may take from nodes that have not yet heard alice connect or hide")
	n := start(t, fastPresence(100*time.Millisecond, time.Millisecond))
	alice, bob, carol := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol")
	n.direct(t, bob, "alice")
	n.dial(t, alice, -1)
	visible := n.call(t, "GET", "/v1/presence?users=alice", bob, nil)
	if !bytes.Contains(visible.raw, []byte(`"online"`)) {
		t.Fatalf("bob sees %s, want alice online", visible.raw)
	}
	stranger := n.call(t, "GET", "/v1/presence?users=alice", carol, nil)
	n.ok(t, "PATCH", "/v1/me", alice, map[string]any{"presence": "hidden"})
	hidden := n.call(t, "GET", "/v1/presence?users=alice", bob, nil)
	if stranger.status != 200 || !bytes.Equal(stranger.raw, hidden.raw) {
		t.Fatalf("stranger: %d %s; hidden: %d %s; want the same 200 bytes", stranger.status, stranger.raw, hidden.status, hidden.raw)
	}
	unknown := n.call(t, "GET", "/v1/presence?users=nobody", carol, nil)
	if want := bytes.ReplaceAll(stranger.raw, []byte("alice"), []byte("nobody")); !bytes.Equal(unknown.raw, want) {
		t.Errorf("unknown user: %s, want %s", unknown.raw, want)
	}
	n.ok(t, "PATCH", "/v1/me", alice, map[string]any{"presence": "visible"})
	if again := n.call(t, "GET", "/v1/presence?users=alice", bob, nil); !bytes.Equal(again.raw, visible.raw) {
		t.Errorf("visible again: %s, want %s", again.raw, visible.raw)
	}
}

// TestPresenceSubscriptionCap: a connection follows at most 500 users, adding or replacing.
func TestPresenceSubscriptionCap(t *testing.T) {
	n := start(t)
	bob := n.user(t, "bob")
	c := n.dial(t, bob, -1)
	ids := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("u%d", i))
		}
		return out
	}
	if r := c.do("presence_subscribe", map[string]any{"users": ids(0, 501)}); num(r["code"]) != 400 {
		t.Errorf("501 users: %s, want 400", show(r))
	}
	if got := subscribe(t, c, ids(0, 500)...); len(got) != 500 {
		t.Errorf("500 users: %d entries", len(got))
	}
	// Strangers are answered but not followed, so the cap counts users one may see: bob
	// himself is the one here.
	if got := subscribe(t, c, "bob"); len(got) != 1 {
		t.Errorf("bob: %d entries", len(got))
	}
}

// TestPresenceCoalesced: many flaps of one user within the coalescing window reach a
// watcher as at most one update, then the last state once the window has passed.
func TestPresenceCoalesced(t *testing.T) {
	parleytest.OneNode(t, "it moves one node's clock and reads one node's metric")
	var clk clock
	n := start(t, withClock(&clk), fastPresence(100*time.Millisecond, 5*time.Second))
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.direct(t, bob, "alice")
	watcher := n.dial(t, bob, -1)
	subscribe(t, watcher, "alice")
	d1 := n.dial(t, alice, -1)
	wantState(t, "connected", presencePush(t, watcher, "alice"), "online")
	for i := range 20 {
		state := "away"
		if i%2 == 1 {
			state = "active"
		}
		d1.do("presence_set", map[string]any{"state": state})
	}
	d1.do("presence_set", map[string]any{"state": "away"})
	eventually(t, "a change held back", func() bool { return n.metric(t, "parley_presence_coalesced_total") > 0 })
	if len(watcher.pushes) != 0 {
		t.Fatalf("%d pushes within the window, want none after the first", len(watcher.pushes))
	}
	clk.advance(5 * time.Second)
	wantState(t, "after the window", presencePush(t, watcher, "alice"), "away")
}
