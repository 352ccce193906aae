package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// The attacks on the bus between nodes (docs/deployment.md, "Trust model"): two nodes on
// PostgreSQL and a real NATS server, and an attacker who reaches the NATS server with a
// plain client and no cluster key. It knows the subject layout and the nodes' prefix.

// busCluster is two nodes on one PostgreSQL schema and NATS, and the attacker's connection.
type busCluster struct {
	a, b    *node
	url     string // the nodes' PostgreSQL schema
	prefix  string
	spy     *nats.Conn
	spyMu   sync.Mutex
	spied   []*nats.Msg // everything the attacker saw on the nodes' subjects
	spyNews chan struct{}
}

func startBusCluster(t *testing.T, configure ...func(*server.Config)) *busCluster {
	t.Helper()
	parleytest.OneNode(t, "it builds its cluster itself")
	bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{}).Close() // skips when NATS is absent
	shared := t.TempDir()
	url := pgtest.SchemaURL(t, shared)
	c := &busCluster{prefix: bustest.RandomPrefix(t), spyNews: make(chan struct{}, 1), url: url}
	nodes := make([]*node, 2)
	for i := range nodes {
		cfg := server.DefaultConfig(t.TempDir())
		cfg.Engine, cfg.PostgresURL, cfg.BlobStore = "postgres", url, parleytest.SharedBlobs(shared)
		cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.Bus = bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: c.prefix, NoEcho: true})
		for _, f := range configure {
			f(&cfg)
		}
		nodes[i] = &node{parleytest.StartWith(t, cfg)}
	}
	c.a, c.b = nodes[0], nodes[1]
	spy, err := nats.Connect(bustest.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spy.Close)
	c.spy = spy
	if _, err := spy.Subscribe(">", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Subject, c.prefix+".") {
			return // another test's
		}
		c.spyMu.Lock()
		c.spied = append(c.spied, m)
		c.spyMu.Unlock()
		select {
		case c.spyNews <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// inject publishes data on the nodes' subject (unprefixed) as the attacker.
func (c *busCluster) inject(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := c.spy.Publish(c.prefix+"."+subject, data); err != nil {
		t.Fatal(err)
	}
	if err := c.spy.Flush(); err != nil {
		t.Fatal(err)
	}
}

// seen is how many messages the attacker has seen so far.
func (c *busCluster) seen() int {
	c.spyMu.Lock()
	defer c.spyMu.Unlock()
	return len(c.spied)
}

// spiedOn waits for the attacker to have seen a message on subject (unprefixed), after
// the first `after` messages it saw, and returns it.
func (c *busCluster) spiedOn(t *testing.T, subject string, after int) []byte {
	t.Helper()
	timeout := time.After(deadline)
	for {
		c.spyMu.Lock()
		for _, m := range c.spied[after:] {
			if m.Subject == c.prefix+"."+subject {
				c.spyMu.Unlock()
				return m.Data
			}
		}
		c.spyMu.Unlock()
		select {
		case <-c.spyNews:
		case <-timeout:
			t.Fatalf("the attacker saw nothing on %s", subject)
		}
	}
}

// rejected is the node's parley_bus_rejected_total for reason, 0 when absent.
func rejected(t *testing.T, n *node, reason string) float64 {
	t.Helper()
	return max(n.metric(t, `parley_bus_rejected_total{reason="`+reason+`"}`), 0)
}

// expectRejected waits until n has rejected one more message for reason than before,
// failing at once if a victim's socket gets a frame or closes meanwhile: what the attack
// would do if the node took it.
func expectRejected(t *testing.T, what string, n *node, reason string, before float64, victims ...*wsClient) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for rejected(t, n, reason) < before+1 {
		for _, v := range victims {
			select {
			case p := <-v.pushes:
				t.Fatalf("%s: the victim's socket got %s", what, show(p))
			case <-v.done:
				t.Fatalf("%s: the victim's socket closed: %v", what, v.err)
			default:
			}
		}
		select {
		case <-tick.C:
		case <-timeout:
			counts := map[string]float64{}
			for _, r := range bus.RejectReasons {
				counts[r] = rejected(t, n, r)
			}
			t.Fatalf("%s: not counted in parley_bus_rejected_total{reason=%q}; the node counts %v", what, reason, counts)
		}
	}
}

// TestBusAttackEavesdrop: an attacker subscribed to every subject while a message goes
// between the nodes sees envelopes only: none of the message's text or ids.
func TestBusAttackEavesdrop(t *testing.T) {
	c := startBusCluster(t)
	alice, bob := c.a.user(t, "alice"), c.a.user(t, "bob")
	conv := c.b.direct(t, alice, "bob")["conv_id"].(string)
	ws := c.a.dial(t, bob, c.a.latest(t, bob))
	ack := c.b.send(t, alice, conv, "whisper-7f3a9c")
	if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "whisper-7f3a9c" {
		t.Fatalf("bob got %s", show(ev))
	}
	c.spiedOn(t, bus.UserSubject("bob"), 0) // the event crossed the bus
	c.spyMu.Lock()
	defer c.spyMu.Unlock()
	secrets := []string{"whisper-7f3a9c", conv, ack["msg_id"].(string), `"k"`}
	for _, m := range c.spied {
		for _, s := range secrets {
			if bytes.Contains(m.Data, []byte(s)) {
				t.Errorf("the attacker read %q on %s: %q", s, m.Subject, m.Data)
			}
		}
	}
}

// TestBusAttackForgery: the attacker publishes, in the nodes' own format, every kind of
// message a node used to act on: a frame for the victim's socket, an event at the next
// cursor, "device connected", a revocation with a huge generation, and a push-feed
// message. Each is dropped and counted as unsealed; the socket gets nothing forged and
// stays open, the real event at that cursor arrives live, and the victim's tokens, old and
// fresh, keep working.
func TestBusAttackForgery(t *testing.T) {
	c := startBusCluster(t)
	alice, bob := c.a.user(t, "alice"), c.a.user(t, "bob")
	conv := c.b.direct(t, alice, "bob")["conv_id"].(string)
	cursor := c.a.latest(t, bob)

	forgedMsg := fmt.Sprintf(`{"conv_id":%q,"seq":2,"msg_id":"forged","client_msg_id":"forged","sender_id":"alice","content_type":1,"content":{"text":"forged"},"created_at":%d}`,
		conv, time.Now().UnixMilli())
	user := bus.UserSubject("bob")
	attacks := []struct{ name, subject, data string }{
		{"a frame for the socket", user, `{"n":"n_evil","k":"e","t":"message","cv":"` + conv + `","d":` + forgedMsg + `}`},
		{"an event at the next cursor", user, fmt.Sprintf(`{"n":"n_evil","k":"v","c":%d,"ts":%d,"t":"message","cv":%q,"d":%s}`,
			cursor+1, time.Now().UnixMilli(), conv, forgedMsg)},
		{"device connected", user, `{"n":"n_evil","k":"d","dv":"d1","si":9000000000000000000}`},
		{"a revocation", "parley.revoke", `{"n":"n_evil","k":"x","u":"bob","g":1000000000000}`},
		{"a push-feed message", "parley.push", `{"t":[{"u":"bob","d":"d1","c":1000000}],"r":["bob"]}`},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			ws := c.a.dial(t, bob, cursor) // a socket of its own: an attack that got through ends it
			ws.ping()
			before := rejected(t, c.a, bus.RejectUnsealed)
			c.inject(t, a.subject, []byte(a.data))
			expectRejected(t, a.name, c.a, bus.RejectUnsealed, before, ws)
			ws.ping()
			ws.conn.Close()
		})
	}

	ws := c.a.dial(t, bob, cursor)
	c.b.send(t, alice, conv, "real-after-forgeries")
	ev := ws.event()
	if num(ev["cursor"]) != cursor+1 || obj(t, ev["data"])["client_msg_id"] != "real-after-forgeries" {
		t.Fatalf("bob's next event %s, want the real message at cursor %d", show(ev), cursor+1)
	}
	ws.ping()
	c.a.ok(t, "GET", "/v1/me", bob, nil)
	for _, n := range []*node{c.a, c.b} { // a fresh token works at once, on either node
		c.a.ok(t, "GET", "/v1/me", n.Token(t, "bob", "d2"), nil)
	}
}

// TestBusAttackReplay: the attacker captures a sealed message and publishes it again, on
// the same subject and onto another user's: the first is refused as a replay, the second
// as forged (the subject is authenticated).
func TestBusAttackReplay(t *testing.T) {
	c := startBusCluster(t)
	alice, bob, carol := c.a.user(t, "alice"), c.a.user(t, "bob"), c.a.user(t, "carol")
	conv := c.b.direct(t, alice, "bob")["conv_id"].(string)
	bobWS := c.a.dial(t, bob, c.a.latest(t, bob))
	carolWS := c.a.dial(t, carol, c.a.latest(t, carol))
	// A message that node A received: one that node A never got (published before it
	// subscribed) is news to it, and a genuine one, within the window.
	seen := c.seen()
	c.b.send(t, alice, conv, "captured")
	bobWS.event()
	sealed := c.spiedOn(t, bus.UserSubject("bob"), seen)

	before := rejected(t, c.a, bus.RejectReplayed)
	c.inject(t, bus.UserSubject("bob"), sealed)
	expectRejected(t, "the replay on the same subject", c.a, bus.RejectReplayed, before, bobWS, carolWS)

	before = rejected(t, c.a, bus.RejectForged)
	c.inject(t, bus.UserSubject("carol"), sealed)
	expectRejected(t, "the replay onto carol's subject", c.a, bus.RejectForged, before, bobWS, carolWS)
	bobWS.ping()
	carolWS.ping()
}

// TestBusKeyRotation rotates the cluster key while two nodes exchange messages both ways:
// every message arrives live, in order, both nodes go over to the new key (the attacker's
// view of the envelopes shows it), and neither drops anything.
func TestBusKeyRotation(t *testing.T) {
	c := startBusCluster(t, func(cfg *server.Config) { cfg.BusKeyReload = 100 * time.Millisecond })
	alice, bob := c.a.user(t, "alice"), c.a.user(t, "bob")
	conv := c.a.direct(t, alice, "bob")["conv_id"].(string)
	aliceWS := c.a.dial(t, alice, c.a.latest(t, alice))
	bobWS := c.b.dial(t, bob, c.b.latest(t, bob))
	exchange := func(i int) {
		t.Helper()
		c.a.send(t, alice, conv, fmt.Sprintf("alice-%d", i))
		c.b.send(t, bob, conv, fmt.Sprintf("bob-%d", i))
		for _, ws := range []*wsClient{aliceWS, bobWS} {
			for _, want := range []string{fmt.Sprintf("alice-%d", i), fmt.Sprintf("bob-%d", i)} {
				if got := obj(t, ws.event()["data"])["client_msg_id"]; got != want {
					t.Fatalf("message %d: got %v, want %s", i, got, want)
				}
			}
		}
	}
	for i := range 3 {
		exchange(i)
	}
	st, err := server.OpenStore(t.Context(), server.Config{Engine: "postgres", PostgresURL: c.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := store.RotateBusKey(t.Context(), st, time.Now().UnixMilli(), server.NewBusSecret)
	if err != nil || k.ID != 2 {
		t.Fatalf("RotateBusKey = %d, %v; want key 2", k.ID, err)
	}
	seen := c.seen()
	timeout := time.After(deadline)
	for i := 3; c.sendersWithKey(seen, 2) < 2; i++ { // until both nodes seal with key 2
		select {
		case <-timeout:
			t.Fatalf("after %d exchanges, %d nodes seal with the new key", i-3, c.sendersWithKey(seen, 2))
		default:
		}
		exchange(i)
	}
	exchange(1000)
	for _, n := range []*node{c.a, c.b} {
		for _, r := range bus.RejectReasons {
			if v := rejected(t, n, r); v != 0 {
				t.Errorf("a node rejected %v messages as %s across the rotation", v, r)
			}
		}
	}
}

// sendersWithKey counts the senders of the envelopes the attacker saw, after the first
// `after`, sealed with key id.
func (c *busCluster) sendersWithKey(after int, id uint32) int {
	c.spyMu.Lock()
	defer c.spyMu.Unlock()
	senders := map[string]bool{}
	for _, m := range c.spied[after:] {
		if len(m.Data) >= 21 && binary.BigEndian.Uint32(m.Data[1:5]) == id {
			senders[string(m.Data[5:21])] = true
		}
	}
	return len(senders)
}

// TestBusAttackSilencePush: the attacker tells the pushing node, in the push feed's own
// format, that the victim's device is connected and has taken every event: the message
// sent next is pushed to the device all the same.
func TestBusAttackSilencePush(t *testing.T) {
	f := pushtest.NewFCM(t)
	c := startBusCluster(t, withFCM(f))
	alice, bob := c.a.user(t, "alice"), c.a.user(t, "bob")
	c.b.ok(t, "PUT", "/v1/push/device", bob, map[string]any{"provider": "fcm", "token": "bobs-phone"})
	conv := c.a.direct(t, alice, "bob")["conv_id"].(string)

	before := rejected(t, c.a, bus.RejectUnsealed)
	c.inject(t, push.FeedSubject, []byte(`{"o":[{"u":"bob","d":"d1"}],"t":[{"u":"bob","d":"d1","c":1000000}]}`))
	expectRejected(t, "the forged push feed", c.a, bus.RejectUnsealed, before)
	c.b.send(t, alice, conv, "pushed-anyway")
	waitCount(t, "pushes to bob's phone", f.WaitCount, 1)
}
