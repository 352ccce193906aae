package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
)

// Several nodes in one process, sharing one store and linked by a bus (docs/design.md,
// "Several nodes"): each flow runs on the in-process bus and on NATS, when one is reachable
// at $PARLEY_TEST_NATS_URL or nats://127.0.0.1:4222.

// busMaker returns the bus of one more node.
type busMaker func(t *testing.T) bus.Bus

// eachBus runs f once on an in-process bus shared by the nodes, and once on NATS with a
// connection per node (skipped, saying how to start it, when NATS is not reachable).
func eachBus(t *testing.T, f func(t *testing.T, newBus busMaker)) {
	t.Run("memory", func(t *testing.T) {
		m := bus.NewMemory(bus.MemoryOptions{})
		t.Cleanup(func() { m.Close() }) // after the nodes', registered later
		f(t, func(*testing.T) bus.Bus { return m })
	})
	t.Run("nats", func(t *testing.T) {
		prefix := bustest.RandomPrefix(t)                                 // the tests' messages stay apart on a shared server
		bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{}).Close() // skips before any node starts
		f(t, func(t *testing.T) bus.Bus {
			return bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix})
		})
	})
}

// startNodes runs count nodes on one store (Pebble, in one data directory that also holds
// the keys they share) and buses from newBus. configure applies to each node.
func startNodes(t *testing.T, count int, newBus busMaker, configure ...func(*server.Config)) []*node {
	t.Helper()
	dir := t.TempDir()
	st, err := server.OpenStore(context.Background(), server.DefaultConfig(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the nodes have stopped
	nodes := make([]*node, count)
	for i := range nodes {
		cfg := server.DefaultConfig(dir)
		cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.Store, cfg.Bus = st, newBus(t)
		for _, f := range configure {
			f(&cfg)
		}
		nodes[i] = &node{parleytest.StartWith(t, cfg)}
	}
	return nodes
}

// TestNodesPushAndWake: a message sent through node B is pushed to the WebSocket and wakes
// the long-poll of its recipient on node A, both of which read it from the shared log.
func TestNodesPushAndWake(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus)
		a, b := ns[0], ns[1]
		alice, bob := a.user(t, "alice"), a.user(t, "bob")
		convID := b.direct(t, bob, "alice")["conv_id"].(string)
		if got := a.ok(t, "GET", "/healthz", "", nil)["bus"]; got != "ok" {
			t.Fatalf("healthz bus %v, want ok", got)
		}

		ws := a.dial(t, alice, a.latest(t, alice))
		b.send(t, bob, convID, "over-the-bus")
		ev := ws.event()
		msg := obj(t, obj(t, ev["data"]))
		if ev["type"] != "message" || msg["client_msg_id"] != "over-the-bus" {
			t.Fatalf("pushed %s, want bob's message", show(ev))
		}

		poll := longPoll(t, a, alice, num(ev["cursor"]), 10)
		b.send(t, bob, convID, "wakes-the-poll")
		got := arr(t, awaitPoll(t, poll, deadline)["events"])
		if len(got) != 1 || obj(t, got[0]["data"])["client_msg_id"] != "wakes-the-poll" {
			t.Fatalf("long-poll answered %s", show(got))
		}
		if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "wakes-the-poll" {
			t.Fatalf("pushed %s", show(ev))
		}
	})
}

// TestNodesReadFanoutRoom: a read-fanout message sent through node B is pushed in full to a
// connection on node A that has the conversation open, and noticed to one that has not.
func TestNodesReadFanoutRoom(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
		a, b := ns[0], ns[1]
		alice, bob, carol, dave := a.user(t, "alice"), a.user(t, "bob"), a.user(t, "carol"), a.user(t, "dave")
		convID := b.group(t, alice, "all hands", false, "bob", "carol", "dave")["conv_id"].(string)

		bobWS := a.dialMark(t, bob, -1, 0)
		bobWS.pushOf("changes")
		bobWS.do("open", map[string]any{"conv_id": convID})
		carolWS := a.dialMark(t, carol, -1, 0)
		carolWS.pushOf("changes")

		ack := b.send(t, alice, convID, "to-the-room")
		m := obj(t, bobWS.pushOf("message")["message"])
		if m["client_msg_id"] != "to-the-room" || num(m["seq"]) != num(ack["seq"]) {
			t.Fatalf("room pushed %s, want seq %v", show(m), ack["seq"])
		}
		carolWS.noticeUntil(convID, num(ack["seq"]))

		// dave long-polls on A; a message sent through B changes the conversation's mark.
		st := a.ok(t, "GET", "/v1/sync?cursor=0", dave, nil)
		poll := longPoll(t, a, dave, num(st["cursor"]), 10, fmt.Sprintf("&mark=%d", num(st["mark"])))
		b.send(t, alice, convID, "wakes-a-watch")
		convs := arr(t, awaitPoll(t, poll, deadline)["conversations"])
		if len(convs) != 1 || convs[0]["conv_id"] != convID {
			t.Fatalf("long-poll answered conversations %s, want %s", show(convs), convID)
		}
	})
}

// TestNodesReceiptsPush: alice sends through node B, bob reads through node C, and alice's
// WebSocket on node A gets the read count pushed.
func TestNodesReceiptsPush(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 3, newBus)
		a, b, c := ns[0], ns[1], ns[2]
		alice, bob := a.user(t, "alice"), a.user(t, "bob")
		a.user(t, "carol")
		convID := a.group(t, alice, "three", false, "bob", "carol")["conv_id"].(string)
		ws := a.dial(t, alice, a.latest(t, alice))

		seq := num(b.send(t, alice, convID, "count-me")["seq"])
		c.ok(t, "POST", "/v1/conversations/"+convID+"/read", bob, map[string]any{"seq": seq})
		for {
			p := ws.pushOf("receipts")
			rs := arr(t, p["receipts"])
			if len(rs) == 1 && num(rs[0]["seq"]) == seq && num(rs[0]["read_count"]) == 1 {
				break
			}
		}
	})
}

// TestNodesCachesFollowChanges: what a node holds in memory of a conversation follows the
// changes other nodes commit: the read counts of node A after a member joins and a member
// reads through node B, and the recent messages of a read-fanout group after a recall there.
func TestNodesCachesFollowChanges(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, func(c *server.Config) {
			c.Chat.WriteFanoutMax = 3
			c.Gateway.HistoryRate = 0 // polled below
		})
		a, b := ns[0], ns[1]
		alice, bob := a.user(t, "alice"), a.user(t, "bob")
		dave := a.user(t, "dave")
		a.user(t, "carol")
		receipts := func(convID string, seq int64) map[string]any {
			return a.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/receipts?seq=%d", convID, seq), alice, nil)
		}

		small := a.group(t, alice, "counts", false, "bob")["conv_id"].(string)
		seq := num(a.send(t, alice, small, "counted")["seq"])
		wantFields(t, "counts on A", receipts(small, seq), map[string]any{"member_count": 1, "read_count": 0})
		b.ok(t, "POST", "/v1/conversations/"+small+"/members", alice, map[string]any{"add": []string{"dave"}})
		b.ok(t, "POST", "/v1/conversations/"+small+"/read", bob, map[string]any{"seq": seq})
		eventually(t, "node A to count the join and the read on B", func() bool {
			r := receipts(small, seq)
			return num(r["member_count"]) == 2 && num(r["read_count"]) == 1
		})

		large := a.group(t, alice, "recent", false, "bob", "carol", "dave")["conv_id"].(string)
		a.send(t, alice, large, "to-recall")
		for range 2 { // the first read fills node A's recent messages, the second is served from them
			if h := a.history(t, dave, large, 0); len(h) != 1 || h[0]["recalled"] != false {
				t.Fatalf("history on A: %s", show(h))
			}
		}
		b.ok(t, "POST", "/v1/messages/recall", alice, map[string]any{"conv_id": large, "seq": 1})
		eventually(t, "node A to drop the recalled message", func() bool {
			h := a.history(t, dave, large, 0)
			return len(h) == 1 && h[0]["recalled"] == true
		})
	})
}

// TestNodesRevokeAndReplace: revoking a user through node A closes their WebSocket on node
// B with 4003, and a device connecting on node B closes its older connection on node A with
// 4001, while the user's other device there stays.
func TestNodesRevokeAndReplace(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus)
		a, b := ns[0], ns[1]
		bob := a.user(t, "bob")
		tablet := a.Token(t, "bob", "tablet")

		old := a.dial(t, bob, -1)
		tabletWS := a.dial(t, tablet, -1)
		newer := b.dial(t, a.Token(t, "bob", "d1"), -1)
		old.wantClosed("d1's connection on A (replaced)", closeReplaced)
		newer.ping()
		tabletWS.ping()

		a.ok(t, "POST", "/v1/admin/users/bob/revoke", a.AdminSecret, nil)
		newer.wantClosed("d1 on B (revoked)", closeRevoked)
		tabletWS.wantClosed("tablet on A (revoked)", closeRevoked)
		b.fail(t, 401, "GET", "/v1/conversations", tablet, nil)
	})
}

// lossyBus drops the next publishes to one subject, and fails every publish while down.
type lossyBus struct {
	bus.Bus
	dropTo string
	drops  atomic.Int32
	down   atomic.Bool
}

func (l *lossyBus) Publish(ctx context.Context, subject string, data []byte) error {
	switch {
	case l.down.Load():
		return fmt.Errorf("%w: test", bus.ErrUnavailable)
	case subject == l.dropTo && l.drops.Add(-1) >= 0:
		return nil // lost on the way
	}
	return l.Bus.Publish(ctx, subject, data)
}

func (l *lossyBus) Healthy() error {
	if l.down.Load() {
		return bus.ErrUnavailable
	}
	return nil
}

// TestNodesLostWakeUp: a wake-up that never arrives only delays: the message is in the
// next sync, and the next wake-up pushes both, in order. A node whose bus is down keeps
// serving, says so on /healthz, and counts the publishes it could not make.
func TestNodesLostWakeUp(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		var lossy *lossyBus
		i := 0
		ns := startNodes(t, 2, func(t *testing.T) bus.Bus {
			if i++; i == 2 { // node B's
				lossy = &lossyBus{Bus: newBus(t), dropTo: bus.UserSubject("alice")}
				return lossy
			}
			return newBus(t)
		})
		a, b := ns[0], ns[1]
		alice, bob := a.user(t, "alice"), a.user(t, "bob")
		convID := b.direct(t, bob, "alice")["conv_id"].(string)
		from := a.latest(t, alice)
		ws := a.dial(t, alice, from)

		lossy.drops.Store(1)
		b.send(t, bob, convID, "lost-wake-up") // its wake-up to alice is dropped before the ack
		synced := arr(t, a.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d", from), alice, nil)["events"])
		if len(synced) != 1 || obj(t, synced[0]["data"])["client_msg_id"] != "lost-wake-up" {
			t.Fatalf("sync after a lost wake-up: %s", show(synced))
		}
		b.send(t, bob, convID, "next")
		for _, want := range []string{"lost-wake-up", "next"} {
			if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != want {
				t.Fatalf("pushed %s, want %s", show(ev), want)
			}
		}

		lossy.down.Store(true)
		if got := b.ok(t, "GET", "/healthz", "", nil)["bus"]; got != "down" {
			t.Fatalf("healthz bus %v while down, want down", got)
		}
		b.send(t, bob, convID, "while-down") // still stored and acked
		if n := b.metric(t, "parley_bus_publish_failed_total"); n < 1 {
			t.Fatalf("parley_bus_publish_failed_total = %v, want at least 1", n)
		}
		lossy.down.Store(false)
		b.send(t, bob, convID, "back")
		for _, want := range []string{"while-down", "back"} {
			if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != want {
				t.Fatalf("pushed %s, want %s", show(ev), want)
			}
		}
	})
}

// TestNodesNATSReconnect: a node that loses NATS keeps serving and says so on /healthz;
// what was committed elsewhere meanwhile reaches its WebSocket once NATS is back, when
// nats.go has restored the node's subscriptions, with nothing else sent meanwhile.
func TestNodesNATSReconnect(t *testing.T) {
	target := strings.TrimPrefix(bustest.NATSURL(), "nats://")
	if strings.ContainsAny(target, ",/") {
		t.Skip("PARLEY_TEST_NATS_URL is not a single host:port")
	}
	bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{}).Close() // skips if NATS is absent
	prefix := bustest.RandomPrefix(t)
	proxy := bustest.StartProxy(t, target)
	i := 0
	ns := startNodes(t, 2, func(t *testing.T) bus.Bus {
		url := bustest.NATSURL()
		if i++; i == 1 { // node A's goes through the proxy
			url = "nats://" + proxy.Addr
		}
		return bustest.OpenNATS(t, url, bus.NATSOptions{Prefix: prefix})
	})
	a, b := ns[0], ns[1]
	alice, bob := a.user(t, "alice"), a.user(t, "bob")
	convID := b.direct(t, bob, "alice")["conv_id"].(string)
	ws := a.dial(t, alice, a.latest(t, alice))
	b.send(t, bob, convID, "before")
	if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "before" {
		t.Fatalf("pushed %s", show(ev))
	}
	busState := func(n *node) func() string {
		return func() string { return fmt.Sprint(n.ok(t, "GET", "/healthz", "", nil)["bus"]) }
	}

	carol, dave := a.user(t, "carol"), a.user(t, "dave")
	other := a.direct(t, carol, "dave")["conv_id"].(string)
	_ = dave

	proxy.Cut()
	eventually(t, "node A to see NATS down", func() bool { return busState(a)() == "down" })
	b.send(t, bob, convID, "during")  // A hears nothing of it
	a.send(t, carol, other, "from-a") // A cannot publish, but stores it
	if n := a.metric(t, "parley_bus_publish_failed_total"); n < 1 {
		t.Fatalf("parley_bus_publish_failed_total = %v on A, want at least 1", n)
	}

	proxy.Restore(t)
	eventually(t, "node A to reconnect", func() bool { return busState(a)() == "ok" })
	// With nothing sent since: A's connections read their logs again once the bus is back.
	if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "during" {
		t.Fatalf("pushed %s after the reconnection, want the message sent while A was cut off", show(ev))
	}
	a.Service.AwaitSubscriptions() // nats.go has resent them; the server has them after this
	b.send(t, bob, convID, "after")
	if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "after" {
		t.Fatalf("pushed %s, want after", show(ev))
	}
}

// TestSingleNodeHealthzBus: a node without a bus says so.
func TestSingleNodeHealthzBus(t *testing.T) {
	parleytest.OneNode(t, "it checks a node without a bus")
	n := start(t)
	if got := n.ok(t, "GET", "/healthz", "", nil)["bus"]; got != "none" {
		t.Fatalf("healthz bus %v, want none", got)
	}
}

// TestNodesTokenAfterRevocationElsewhere: a token minted after a revocation is accepted by
// every node, also by one that has not heard of the revocation (here the nodes share no
// bus at all): minting reads the generation from the store, and a token newer than a
// node's cached generation makes it read the store again.
func TestNodesTokenAfterRevocationElsewhere(t *testing.T) {
	ns := startNodes(t, 2, func(t *testing.T) bus.Bus {
		m := bus.NewMemory(bus.MemoryOptions{}) // a bus of its own: the nodes hear nothing from each other
		t.Cleanup(func() { m.Close() })
		return m
	})
	a, b := ns[0], ns[1]
	old := a.user(t, "bob")
	a.ok(t, "GET", "/v1/me", old, nil)
	b.ok(t, "GET", "/v1/me", old, nil) // b caches generation 1
	a.ok(t, "POST", "/v1/admin/users/bob/revoke", a.AdminSecret, nil)
	fresh := b.Token(t, "bob", "d2") // minted by the node that missed the revocation
	for _, n := range ns {
		n.ok(t, "GET", "/v1/me", fresh, nil)
	}
	a.fail(t, 401, "GET", "/v1/me", old, nil)
	b.fail(t, 401, "GET", "/v1/me", old, nil) // b now knows generation 2
}
