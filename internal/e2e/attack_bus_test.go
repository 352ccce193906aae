package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/server"
)

// Attacks from the bus the nodes share, by a sender that is not a node: messages put on the
// bus as they are, below any sealing of the bus, so what a holder of the cluster key could
// send (each runs on the in-process bus and on NATS, where the forger is a NATS client of
// its own). Every node must check what it takes from the bus: none of these may reach a
// socket as it came, close a connection the store does not say to close, or refuse a
// token the store honours.

// forge publishes m, a bus message of Parley's form from a node that does not exist, on
// subject through b, and waits until the bus's server has it: whatever another publisher
// sends after forge returns reaches each subscriber after it.
func forge(t *testing.T, b bus.Bus, subject string, m map[string]any) {
	t.Helper()
	m["n"] = "n_forger"
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), subject, data); err != nil {
		t.Fatal(err)
	}
	if f, ok := b.(interface{ Flush(time.Duration) error }); ok {
		if err := f.Flush(deadline); err != nil {
			t.Fatal(err)
		}
	}
}

const rejectedInvalid = `parley_bus_rejected_total{reason="invalid"}`

// belowSealing configures the nodes of these tests to take the bus's messages as they come,
// unsealed, so that a forgery reaches what a node does with a message from a sender that
// holds the cluster key: sealing is what keeps everyone else off the bus, and the
// sealed-bus attacks are in busattack_test.go.
func belowSealing(c *server.Config) { c.BusNoSeal = true }

// TestAttackBusForgedFrames: frames forged on alice's subject (a whole frame as an event's
// data at her next cursor, an event of another type, a message of another conversation, a
// raw frame as a receipts push) reach neither her socket nor her cursor: the next push she
// gets is the real message at that cursor, and the node counts what it dropped.
func TestAttackBusForgedFrames(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, belowSealing)
		a, b, forger := ns[0], ns[1], newBus(t)
		alice, bob := a.user(t, "alice"), a.user(t, "bob")
		convID := b.direct(t, bob, "alice")["conv_id"].(string)
		from := a.latest(t, alice)
		ws := a.dial(t, alice, from)
		subject := bus.UserSubject("alice")

		next := from + 1
		message := func(conv, clientMsgID string) json.RawMessage {
			return json.RawMessage(fmt.Sprintf(`{"conv_id":%q,"seq":1,"msg_id":"m_forged","client_msg_id":%q,"sender_id":"bob","content_type":1,"content":{"text":"forged"},"extra":null,"created_at":1,"recalled":false}`, conv, clientMsgID))
		}
		forged := []map[string]any{
			// A whole push frame, as an event's data.
			{"k": "v", "c": next, "ts": 1, "t": "message", "cv": convID, "d": json.RawMessage(`{"op":"revoked","forged":true}`)},
			// A conv_updated event, which would make her connection follow a room.
			{"k": "v", "c": next, "ts": 1, "t": "conv_updated", "cv": convID, "d": message(convID, "forged-type")},
			// A message of another conversation than the event names.
			{"k": "v", "c": next, "ts": 1, "t": "message", "cv": convID, "d": message("d_other", "forged-conv")},
			// A raw frame as a receipts push.
			{"k": "e", "t": "receipts", "cv": convID, "d": json.RawMessage(fmt.Sprintf(`{"op":"event","event":{"cursor":%d,"type":"message","conv_id":%q,"ts":1,"data":{"client_msg_id":"forged-frame"}}}`, next, convID))},
		}
		for _, m := range forged {
			forge(t, forger, subject, m)
		}
		b.send(t, bob, convID, "real")
		ev := ws.event()
		if num(ev["cursor"]) != next || obj(t, ev["data"])["client_msg_id"] != "real" {
			t.Fatalf("first push after the forgeries: %s, want the real message at cursor %d", show(ev), next)
		}
		if n := a.metric(t, rejectedInvalid); n < float64(len(forged)) {
			t.Fatalf("%s = %v, want at least %d", rejectedInvalid, n, len(forged))
		}
	})
}

// TestAttackBusEventsAhead: a well-formed message event forged at a cursor far ahead of
// alice's log neither closes her connection nor holds back the real event at her next
// cursor; a large group's message forged at a seq far ahead of the group's does not take
// the place of the real messages in the room, which are pushed.
func TestAttackBusEventsAhead(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, belowSealing, func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
		a, b, forger := ns[0], ns[1], newBus(t)
		alice, bob, convID, bobWS := openLargeGroup(t, a, b, "bob")

		from := a.latest(t, bob)
		direct := b.direct(t, alice, "bob")["conv_id"].(string)
		ws := a.dial(t, a.Token(t, "bob", "tablet"), a.latest(t, bob))
		payload := fmt.Sprintf(`{"conv_id":%q,"seq":1,"msg_id":"m_forged","client_msg_id":"forged","sender_id":"alice","content_type":1,"content":{"text":"forged"},"extra":null,"created_at":1,"recalled":false}`, direct)
		forge(t, forger, bus.UserSubject("bob"), map[string]any{"k": "v", "c": from + 1000, "ts": 1, "t": "message", "cv": direct, "d": json.RawMessage(payload)})
		ack := b.send(t, alice, direct, "real")
		if ev := ws.event(); obj(t, ev["data"])["client_msg_id"] != "real" || num(obj(t, ev["data"])["seq"]) != num(ack["seq"]) {
			t.Fatalf("pushed %s after an event forged ahead, want the real message", show(ev))
		}
		ws.ping()

		// More than a room holds out of order: it would skip to the lowest of them.
		ahead := num(a.brief(t, bob, convID)["max_seq"]) + 5000
		for seq := ahead; seq < ahead+100; seq++ {
			room := fmt.Sprintf(`{"conv_id":%q,"seq":%d,"msg_id":"m_forged","client_msg_id":"forged","sender_id":"alice","content_type":1,"content":{"text":"forged"},"extra":null,"created_at":1,"recalled":false}`, convID, seq)
			forge(t, forger, bus.ConvSubject(convID), map[string]any{"k": "m", "s": seq, "u": "alice", "ts": 1, "d": json.RawMessage(room)})
		}
		for i := range 3 {
			ack := b.send(t, alice, convID, fmt.Sprintf("real-%d", i))
			if m := obj(t, bobWS.pushOf("message")["message"]); m["client_msg_id"] != ack["client_msg_id"] {
				t.Fatalf("room pushed %s, want the real message %v", show(m), ack["client_msg_id"])
			}
		}
	})
}

// openLargeGroup has alice make, through node b, a group of four read by fanout (nodes
// made with WriteFanoutMax 2), and viewer open it on a WebSocket to node a. It returns
// alice's token, viewer's, the group and the WebSocket.
func openLargeGroup(t *testing.T, a, b *node, viewer string) (alice, token, convID string, ws *wsClient) {
	t.Helper()
	alice = a.user(t, "alice")
	for _, u := range []string{"bob", "carol", "dave"} {
		if u == viewer {
			token = a.user(t, u)
		} else {
			a.user(t, u)
		}
	}
	convID = b.group(t, alice, "all hands", false, "bob", "carol", "dave")["conv_id"].(string)
	ws = a.dialMark(t, token, -1, 0)
	ws.pushOf("changes")
	ws.do("open", map[string]any{"conv_id": convID})
	return alice, token, convID, ws
}

// TestAttackBusForgedRoomPush: a forged push of a read-fanout group's message, on the
// group's subject, does not reach the members who have it open, nor take the seq of the
// real one, which they get.
func TestAttackBusForgedRoomPush(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, belowSealing, func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
		a, b, forger := ns[0], ns[1], newBus(t)
		alice, bob, convID, bobWS := openLargeGroup(t, a, b, "bob")

		seq := num(a.brief(t, bob, convID)["max_seq"]) + 1
		frame := fmt.Sprintf(`{"op":"message","message":{"conv_id":%q,"seq":%d,"msg_id":"m_forged","client_msg_id":"forged","sender_id":"alice","content_type":1,"content":{"text":"forged"},"extra":null,"created_at":1,"recalled":false}}`, convID, seq)
		forge(t, forger, bus.ConvSubject(convID), map[string]any{"k": "m", "s": seq, "u": "alice", "ts": 1, "d": json.RawMessage(frame)})
		ack := b.send(t, alice, convID, "real")
		m := obj(t, bobWS.pushOf("message")["message"])
		if m["client_msg_id"] != "real" || num(m["seq"]) != num(ack["seq"]) {
			t.Fatalf("room pushed %s, want the real message %v", show(m), ack["seq"])
		}
		if n := a.metric(t, rejectedInvalid); n < 1 {
			t.Fatalf("%s = %v, want at least 1", rejectedInvalid, n)
		}
	})
}

// TestAttackBusForgedRevocation: a revocation of alice with a huge generation, forged on the
// revocations' subject, closes none of her connections and refuses none of her tokens, old
// or fresh, on any node: the nodes read her generation from the store. A real revocation
// of carol through node B, sent after it, is still applied on node A.
func TestAttackBusForgedRevocation(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, belowSealing)
		a, b, forger := ns[0], ns[1], newBus(t)
		alice, carol := a.user(t, "alice"), a.user(t, "carol")
		ws := a.dial(t, alice, -1)
		carolWS := a.dial(t, carol, -1)
		ws.ping()

		forge(t, forger, "parley.revoke", map[string]any{"k": "x", "u": "alice", "g": int64(1) << 50})
		b.ok(t, "POST", "/v1/admin/users/carol/revoke", b.AdminSecret, nil)
		carolWS.wantClosed("carol's connection on A, revoked after the forgery", closeRevoked) // A has taken the forgery too

		ws.ping()
		fresh := a.Token(t, "alice", "d2")
		for i, n := range ns {
			n.ok(t, "GET", "/v1/me", alice, nil)
			if r := n.call(t, "GET", "/v1/me", fresh, nil); r.status != 200 {
				t.Fatalf("node %d: a token minted after the forged revocation got %d, want 200", i, r.status)
			}
		}
	})
}

// TestAttackBusForgedDeviceConnected: a "device connected" forged with a time in the
// future, or a device id of a form no device has, closes no connection; one of the form a
// node sends still closes the device's older connection (what the store cannot confirm,
// docs/deployment.md).
func TestAttackBusForgedDeviceConnected(t *testing.T) {
	eachBus(t, func(t *testing.T, newBus busMaker) {
		ns := startNodes(t, 2, newBus, belowSealing)
		a, forger := ns[0], newBus(t)
		a.user(t, "alice")
		phone := a.dial(t, a.Token(t, "alice", "phone"), -1)
		marker := a.dial(t, a.Token(t, "alice", "marker"), -1)
		subject := bus.UserSubject("alice")

		forge(t, forger, subject, map[string]any{"k": "d", "dv": "phone", "si": time.Now().Add(time.Hour).UnixNano()})
		forge(t, forger, subject, map[string]any{"k": "d", "dv": "phone\n", "si": time.Now().UnixNano()})
		forge(t, forger, subject, map[string]any{"k": "d", "dv": "marker", "si": time.Now().UnixNano()})
		marker.wantClosed("the marker device, replaced after the forgeries", closeReplaced) // A has taken them all
		phone.ping()
		if n := a.metric(t, rejectedInvalid); n < 2 {
			t.Fatalf("%s = %v, want at least 2", rejectedInvalid, n)
		}
	})
}

// TestNodesLostRemovalLeavesTheRoom: dave, removed from a large group through node B while
// every bus message to his subject is lost, follows its room on node A no longer than a
// minute: once that has passed, the next message has node A check the room's followers
// against the store, and dave's connection reads his log, where his removal is.
func TestNodesLostRemovalLeavesTheRoom(t *testing.T) {
	var clk clock
	m := bus.NewMemory(bus.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	var lossy *lossyBus
	i := 0
	ns := startNodes(t, 2, func(*testing.T) bus.Bus {
		if i++; i == 2 { // node B's
			lossy = &lossyBus{Bus: m, dropTo: bus.UserSubject("dave")}
			return lossy
		}
		return m
	}, withClock(&clk), func(c *server.Config) { c.Chat.WriteFanoutMax = 2 })
	alice, _, convID, daveWS := openLargeGroup(t, ns[0], ns[1], "dave")
	b := ns[1]

	lossy.drops.Store(1 << 20) // every message from B to dave's subject is lost
	b.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"remove": []string{"dave"}})
	clk.advance(time.Minute + time.Second)
	b.send(t, alice, convID, "after-the-removal")
	for { // the message may come before the check; the removal must come
		p := daveWS.push()
		if p["op"] == "message" {
			continue
		}
		ev := obj(t, p["event"])
		if p["op"] != "event" || ev["type"] != "conv_updated" || ev["conv_id"] != convID {
			t.Fatalf("dave was pushed %s, want his removal", show(p))
		}
		if obj(t, ev["data"])["removed"] != true {
			t.Fatalf("dave was pushed %s, want his removal", show(p))
		}
		break
	}
}
