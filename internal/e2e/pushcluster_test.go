package e2e

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestPushCluster runs three nodes on one PostgreSQL schema and NATS: only the node that
// holds the push lead sends, so a message sent through any node is pushed once; a device
// connected to another node than the pusher's is not pushed what it took there; and a
// registration made on any node is pushed to.
func TestPushCluster(t *testing.T) {
	parleytest.OneNode(t, "it builds its cluster itself")
	dir := t.TempDir()
	url := pgtest.SchemaURL(t, dir)
	prefix := bustest.RandomPrefix(t)
	bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{}).Close() // skips when NATS is absent
	f := pushtest.NewFCM(t)
	nodes := make([]*node, 3)
	for i := range nodes {
		cfg := server.DefaultConfig(t.TempDir())
		cfg.Engine, cfg.PostgresURL, cfg.BlobStore = "postgres", url, parleytest.SharedBlobs(dir)
		cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.Bus = bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix, NoEcho: true})
		withFCM(f)(&cfg)
		nodes[i] = &node{parleytest.StartWith(t, cfg)}
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	alice, bob := a.user(t, "alice"), a.user(t, "bob")
	b.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "bobs-phone"})
	d := c.direct(t, alice, "bob")["conv_id"].(string)

	for i, n := range nodes { // a message through each node: one push each
		n.send(t, alice, d, "m"+string(rune('1'+i)))
		waitCount(t, "pushes", f.WaitCount, i+1)
	}
	if f.Requests() != 3 || f.Repeats() != 0 {
		t.Fatalf("%d requests and %d repeats for 3 messages: more than one node pushes", f.Requests(), f.Repeats())
	}

	// Connected on each node in turn: what it takes there is not pushed by the leader,
	// wherever that is.
	for i, n := range nodes {
		ws := n.dial(t, bob, n.latest(t, bob))
		a.send(t, alice, d, "live"+string(rune('1'+i)))
		if ev := ws.event(); ev["type"] != "message" {
			t.Fatalf("pushed %v", ev)
		}
		ws.conn.Close()
	}
	a.send(t, alice, d, "after")
	waitCount(t, "pushes", f.WaitCount, 4)
	if m := f.Messages()[3]; m.Data["seq"] != "7" {
		t.Fatalf("fourth push %v, want seq 7: seqs 4-6 were taken live", m.Data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := f.WaitCount(ctx, 5); err == nil { // a bound on a push that must not come
		t.Fatalf("a fifth push: %v", f.Messages()[4].Data)
	}
}
