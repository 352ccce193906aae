package chat

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// cluster links this node's live state to the other nodes' through a bus, when there are
// several nodes on one store (docs/design.md, "Several nodes"). Nothing it carries is state
// the store does not hold: the bus is at most once, and a message lost only delays what the
// readers' next sync, or the next message, brings.
//
//   - A user's subject (bus.UserSubject) carries wake-ups ("the user's log has an event at
//     cursor C"; the node reads the log, never the event from the bus), ephemeral frames
//     (receipts pushes) with their bytes, and "device D connected at T", which ends the
//     device's older connections here (4001). A node subscribes to it while its hub has a
//     subscription of the user (hub.Interest).
//   - A conversation's subject (bus.ConvSubject) carries a read-fanout conversation's
//     committed messages (their push frames, for the rooms), members' position raises (for
//     the read counts and the receipts pushes), "members changed" (counts built before it
//     are dropped) and "a message was recalled" (the recent messages held are dropped). A
//     node subscribes to it while it holds anything of the conversation: a room, a long-poll
//     watching it, its counts, its recent messages, or its senders' receipts.
//   - One subject for all, revokeSubject, carries revocations: every node drops its cached
//     token generation of the user and kicks the user's subscriptions. Each node subscribes
//     for its whole life, since any node may have a generation cached.
//
// Without a bus (one node) the Service has no cluster, and none of this costs anything.
type cluster struct {
	s    *Service
	bus  bus.Bus
	node string // this node's id: a node ignores what it published itself

	mu   sync.Mutex // guards subs; taken after the lock of any holder (hub shard, counts shard, recent)
	subs map[string]*busInterest

	rmu         sync.Mutex           // guards roomChecked; taken last
	roomChecked map[string]time.Time // rooms here -> when their followers' membership was last checked (checkRoom)

	gensCleared atomic.Int64 // Unix nanoseconds of the last clearing of the generations cached
	failures    atomic.Int64 // publishes refused since the last warning
	lastWarn    atomic.Int64 // Unix nanoseconds of the last warning
}

// revokeSubject is the subject of revocations, which every node receives.
const revokeSubject = "parley.revoke"

// genTTL bounds how long a node trusts a cached token generation when it is one of several:
// a revocation whose message it missed takes effect there within genTTL. The store's
// generation stays the authority.
const genTTL = 30 * time.Second

// cacheTTL bounds how long a node uses the read counts and recent messages it holds when
// it is one of several: a raise or a recall on another node whose bus message it missed
// is seen once they are read again from the store.
const cacheTTL = time.Minute

// warnEvery is the least time between two warnings of publishes the bus refused.
const warnEvery = 10 * time.Second

// holder is one kind of this node's state of a user or conversation that wants the subject.
type holder uint8

const (
	holdUser     holder = 1 << iota // the hub's subscriptions of the user
	holdRoom                        // the hub's room of the conversation
	holdWatch                       // long-polls watching the conversation
	holdCounts                      // its read counts, built or being built
	holdRecent                      // its recent messages
	holdReceipts                    // its senders' receipts pushes
)

// busInterest is this node's subscription to one subject, for as long as a holder wants it.
type busInterest struct {
	holders holder
	sub     bus.Subscription // nil if Subscribe failed (the bus is closed)
}

// The kinds of bus messages.
const (
	kindWake      = "w" // user: an event at Cursor
	kindEvent     = "v" // user: the event at Cursor, a message: Type, Conv, TS and Data its hub.Body
	kindEphemeral = "e" // user: a receipts push, in no log (Type, Conv, Receipts)
	kindDevice    = "d" // user: Device connected at Since
	kindMessage   = "m" // conv: a read-fanout message Seq by User, its payload in Data, not pushed to Users (in their logs)
	kindPositions = "p" // conv: User's positions are at least Read, Delivered
	kindMembers   = "j" // conv: members joined or left
	kindRecall    = "r" // conv: a message was recalled
	kindRevoke    = "x" // revoke: User's tokens up to generation Gen are revoked
)

// busMsg is every message the nodes exchange, in JSON: small, and read by Parley only. A
// node checks every field of one before it acts on it (busrecv.go).
type busMsg struct {
	Node      string              `json:"n"`
	Kind      string              `json:"k"`
	User      string              `json:"u,omitempty"`
	Cursor    int64               `json:"c,omitempty"`
	Seq       int64               `json:"s,omitempty"`
	TS        int64               `json:"ts,omitempty"`
	Read      int64               `json:"r,omitempty"`
	Delivered int64               `json:"dl,omitempty"`
	Device    string              `json:"dv,omitempty"`
	Since     int64               `json:"si,omitempty"`
	Gen       int64               `json:"g,omitempty"`
	Type      string              `json:"t,omitempty"`
	Conv      string              `json:"cv,omitempty"`
	Data      json.RawMessage     `json:"d,omitempty"`
	Users     []string            `json:"us,omitempty"`
	Receipts  []protocol.Receipts `json:"rc,omitempty"`
}

// busObserver is what an Observer may also implement to count the bus's refusals.
type busObserver interface{ BusPublishFailed() }

// newCluster joins s to the other nodes on b.
func newCluster(s *Service, b bus.Bus) *cluster {
	c := &cluster{s: s, bus: b, node: newID("n_"), subs: make(map[string]*busInterest), roomChecked: make(map[string]time.Time)}
	c.gensCleared.Store(time.Now().UnixNano())
	if _, err := b.Subscribe(revokeSubject, c.onRevoke); err != nil { // for the bus's life
		s.log.Error("bus: subscribe to revocations", "err", err)
	}
	if r, ok := b.(reconnector); ok {
		r.OnReconnect(c.reconnected)
	}
	c.flush()
	return c
}

// reconnector is a bus that reports a reconnection (bus.NATS).
type reconnector interface{ OnReconnect(func()) }

// reconnected makes up for the wake-ups lost while the bus was down: every connection and
// long-poll of this node reads its log from its cursor (a wake-up ahead of any cursor),
// once the subscriptions are back on the server, so that nothing committed meanwhile waits
// for the user's next event.
func (c *cluster) reconnected() {
	c.flush()
	c.s.hub.WakeAll(math.MaxInt64)
	c.s.log.Info("bus: reconnected; every connection reads its log again")
}

// User implements hub.Interest.
func (c *cluster) User(userID string, on bool) {
	c.hold(bus.UserSubject(userID), holdUser, on, func(d []byte) { c.onUser(userID, d) })
}

// Room implements hub.Interest.
func (c *cluster) Room(convID string, on bool) {
	c.holdConv(convID, holdRoom, on)
	c.rmu.Lock()
	if on {
		c.roomChecked[convID] = c.s.now() // its followers were members when they followed
	} else {
		delete(c.roomChecked, convID)
	}
	c.rmu.Unlock()
}

// ConvWatch implements hub.Interest.
func (c *cluster) ConvWatch(convID string, on bool) { c.holdConv(convID, holdWatch, on) }

var _ hub.Interest = (*cluster)(nil)

// holdConv records whether holder h wants convID's subject.
func (c *cluster) holdConv(convID string, h holder, on bool) {
	c.hold(bus.ConvSubject(convID), h, on, func(d []byte) { c.onConv(convID, d) })
}

// hold records whether holder h wants subject: the node subscribes (with handler) when the
// first holder wants it and unsubscribes when the last no longer does. Recording what is
// already recorded changes nothing.
func (c *cluster) hold(subject string, h holder, on bool, handler func([]byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.subs[subject]
	if !on {
		if in == nil || in.holders&h == 0 {
			return
		}
		if in.holders &^= h; in.holders == 0 {
			if in.sub != nil {
				_ = in.sub.Unsubscribe()
			}
			delete(c.subs, subject)
		}
		return
	}
	if in == nil {
		in = &busInterest{}
		sub, err := c.bus.Subscribe(subject, handler)
		if err != nil && !errors.Is(err, bus.ErrClosed) {
			c.s.log.Error("bus: subscribe", "subject", subject, "err", err)
		}
		in.sub = sub
		c.subs[subject] = in
	}
	in.holders |= h
}

// publish sends m on subject. A refusal (NATS unreachable) is counted and logged now and
// then, and otherwise ignored: the readers on other nodes get what it announced on their
// next sync.
func (c *cluster) publish(subject string, m busMsg) {
	m.Node = c.node
	data, err := json.Marshal(m)
	if err != nil {
		c.s.log.Error("bus: encode", "kind", m.Kind, "err", err) // cannot happen: strings, numbers and JSON frames
		return
	}
	c.send(subject, data)
}

// send publishes data, an encoded busMsg, on subject, as publish does.
func (c *cluster) send(subject string, data []byte) {
	err := c.bus.Publish(c.s.bg.Context(), subject, data)
	if err == nil || errors.Is(err, bus.ErrClosed) {
		return
	}
	if o, ok := c.s.obs.(busObserver); ok {
		o.BusPublishFailed()
	}
	n := c.failures.Add(1)
	now, last := time.Now().UnixNano(), c.lastWarn.Load()
	if now-last >= int64(warnEvery) && c.lastWarn.CompareAndSwap(last, now) {
		c.failures.Add(-n)
		c.s.log.Warn("bus: publish failed; readers on other nodes catch up on their next sync",
			"subject", subject, "err", err, "failed", n)
	}
}

// decode reads a message of another node; ok is false for this node's own and for garbage,
// which is counted.
func (c *cluster) decode(data []byte) (m busMsg, ok bool) {
	if err := json.Unmarshal(data, &m); err != nil {
		c.reject(rejectMalformed)
		return m, false
	}
	return m, m.Node != c.node
}

// ---- what this node tells the others ----

// wake tells the other nodes that userID's log has an event at cursor. It is the one
// message sent per recipient of a send (500 for a message to a group of 500, before the
// ack), so it is encoded by hand rather than by encoding/json: the same bytes, without
// reflection.
func (c *cluster) wake(userID string, cursor int64) {
	buf := make([]byte, 0, 48+len(c.node))
	buf = append(buf, `{"n":"`...)
	buf = append(buf, c.node...) // [a-z0-9_]: no escaping
	buf = append(buf, `","k":"`+kindWake+`","c":`...)
	buf = strconv.AppendInt(buf, cursor, 10)
	buf = append(buf, '}')
	c.send(bus.UserSubject(userID), buf)
}

// event tells the other nodes that userID's log has the event b at cursor, with b: a
// message event, whose payload the send has encoded once already. A connection on another
// node that has pushed up to cursor-1 pushes it at once, as from its own node's hub, where
// a bare wake-up would cost it a read of the log per message (a transaction on the shared
// database for every recipient of every send); one that is further behind fills the gap
// from the log as for a wake-up. It is encoded by hand, as wake is, and the payload is
// JSON already.
func (c *cluster) event(userID string, cursor int64, b *hub.Body) {
	buf := make([]byte, 0, 96+len(c.node)+len(b.ConvID)+len(b.Data))
	buf = append(buf, `{"n":"`...)
	buf = append(buf, c.node...)
	buf = append(buf, `","k":"`+kindEvent+`","c":`...)
	buf = strconv.AppendInt(buf, cursor, 10)
	buf = append(buf, `,"ts":`...)
	buf = strconv.AppendInt(buf, b.TS, 10)
	buf = append(buf, `,"t":`...)
	buf = protocol.AppendString(buf, b.Type)
	buf = append(buf, `,"cv":`...)
	buf = protocol.AppendString(buf, b.ConvID)
	buf = append(buf, `,"d":`...)
	buf = append(buf, b.Data...)
	buf = append(buf, '}')
	c.send(bus.UserSubject(userID), buf)
}

// ephemeral hands the other nodes a receipts push of convID for userID's connections,
// which is in no log: its counts, rs.
func (c *cluster) ephemeral(userID, convID string, rs []protocol.Receipts) {
	c.publish(bus.UserSubject(userID), busMsg{Kind: kindEphemeral, Type: protocol.OpReceipts, Conv: convID, Receipts: rs})
}

// deviceConnected tells the other nodes that a connection of the device opened at since.
func (c *cluster) deviceConnected(me Identity, since int64) {
	c.publish(bus.UserSubject(me.UserID), busMsg{Kind: kindDevice, Device: me.DeviceID, Since: since})
}

// message hands the other nodes' rooms a committed message of a read-fanout conversation,
// payload its encoding.
func (c *cluster) message(convID string, seq int64, senderID string, ts int64, payload []byte, inLog []string) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindMessage, Seq: seq, User: senderID, TS: ts, Data: payload, Users: inLog})
}

// positions tells the other nodes that userID's positions in convID moved.
func (c *cluster) positions(convID, userID string, read, delivered int64) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindPositions, User: userID, Read: read, Delivered: delivered})
}

// convChanged tells the other nodes that convID's members changed (kindMembers) or one of
// its messages was recalled (kindRecall).
func (c *cluster) convChanged(convID, kind string) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kind})
}

// revoke tells every node that userID's tokens below gen are revoked.
func (c *cluster) revoke(userID string, gen int64) {
	c.publish(revokeSubject, busMsg{Kind: kindRevoke, User: userID, Gen: gen})
}

// ---- what the others tell this node ----

func (c *cluster) onUser(userID string, data []byte) {
	m, node, ok := readUserMsg(data)
	if ok && string(node) == c.node {
		return
	}
	if !ok {
		if m, ok = c.decode(data); !ok {
			return
		}
	}
	switch m.Kind {
	case kindWake:
		if !validPos(m.Cursor) {
			c.reject(rejectInvalid)
			return
		}
		c.s.hub.Publish(userID, []hub.Event{{Cursor: m.Cursor}}) // no Body: read the log
	case kindEvent:
		b, ok := c.eventBody(&m)
		if !ok {
			c.reject(rejectInvalid)
			return
		}
		c.s.hub.Publish(userID, []hub.Event{{Cursor: m.Cursor, Body: b}})
	case kindEphemeral:
		if !receiptsValid(&m) {
			c.reject(rejectInvalid)
			return
		}
		b, ok := receiptsBody(m.Conv, m.Receipts)
		if !ok {
			return
		}
		c.s.hub.Publish(userID, []hub.Event{{Body: b}})
	case kindDevice:
		if !deviceValid(&m, time.Now()) { // the clock Since was read on
			c.reject(rejectInvalid)
			return
		}
		c.s.hub.Replace(userID, m.Device, m.Since)
	default:
		c.reject(rejectInvalid)
	}
}

func (c *cluster) onConv(convID string, data []byte) {
	m, ok := c.decode(data)
	if !ok {
		return
	}
	switch m.Kind {
	case kindMessage:
		b, ok := c.roomBody(convID, &m)
		if !ok || !c.plausibleSeq(convID, m.Seq) {
			c.reject(rejectInvalid)
			return
		}
		// Only a room with followers here takes it: a room made by it would keep the node
		// subscribed, for nobody, as long as messages come.
		if c.s.hub.Followed(convID) {
			c.s.hub.Message(convID, m.Seq, m.User, b)
			c.checkRoom(convID)
		}
		c.s.hub.NotifyConversation(convID)
	case kindPositions:
		if !protocol.ValidUserID(m.User) || m.Read < 0 || m.Read > protocol.MaxSafeInteger ||
			m.Delivered < 0 || m.Delivered > protocol.MaxSafeInteger {
			c.reject(rejectInvalid)
			return
		}
		c.s.raisedElsewhere(convID, m.User, m.Read, m.Delivered)
	case kindMembers:
		c.s.counts.ForgetSoon(convID)
		c.s.countsChanged(convID) // its next receipts push forgets the senders who left
	case kindRecall:
		c.s.recent.Drop(convID)
	default:
		c.reject(rejectInvalid)
	}
}

// onRevoke takes a revocation from another node as a hint: the user's token generation is
// read from the store, and only the connections whose tokens are older than that one are
// closed. A revocation that names a generation this node already knows needs no read. The
// generation in the message is never believed: a forged one, however high, neither closes a
// connection nor refuses a token the store still honours.
func (c *cluster) onRevoke(data []byte) {
	m, ok := c.decode(data)
	if !ok {
		return
	}
	if m.Kind != kindRevoke || !protocol.ValidUserID(m.User) || !validPos(m.Gen) {
		c.reject(rejectInvalid)
		return
	}
	if g, ok := c.s.gens.Load(m.User); ok && g.(int64) >= m.Gen {
		c.s.hub.KickBelow(m.User, g.(int64)) // known already, from the store: no read
		return
	}
	ctx, cancel := context.WithTimeout(c.s.bg.Context(), revokeReadTimeout)
	defer cancel()
	gen, err := c.s.storedGen(ctx, m.User)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			// The store did not answer: connections re-check their tokens within genTTL.
			c.s.log.Warn("bus: read the token generation of a revocation", "user", m.User, "err", err)
		}
		return
	}
	c.s.hub.KickBelow(m.User, gen)
}

// revokeReadTimeout bounds onRevoke's read of the store, on the bus's delivery goroutine.
const revokeReadTimeout = 5 * time.Second

// expireGens clears the token generations cached once they are genTTL old, so that a
// revocation whose message this node missed takes effect here within genTTL.
func (c *cluster) expireGens() {
	now, last := time.Now().UnixNano(), c.gensCleared.Load()
	if now-last >= int64(genTTL) && c.gensCleared.CompareAndSwap(last, now) {
		c.s.gens.Clear()
	}
}

// BusState reports the bus for /healthz: "none" without one (a single node), "ok" while it
// carries messages, and "down" while it cannot (NATS unreachable: the node keeps serving,
// and its readers catch up by sync).
func (s *Service) BusState() string {
	if s.cluster == nil {
		return "none"
	}
	if h, ok := s.cluster.bus.(interface{ Healthy() error }); ok && h.Healthy() != nil {
		return "down"
	}
	return "ok"
}

// DeviceConnected tells the other nodes that a WebSocket connection of me's device opened
// at since (Unix nanoseconds), so that they close the device's older connections (the
// gateway closes those of this node itself). Without a bus it does nothing.
func (s *Service) DeviceConnected(me Identity, since int64) {
	if s.cluster != nil {
		s.cluster.deviceConnected(me, since)
	}
}

// flushTimeout bounds AwaitSubscriptions' wait for the bus's server.
const flushTimeout = time.Second

// AwaitSubscriptions returns once the bus subscriptions this node made so far (for the hub
// subscriptions, rooms and watches just made) reach the bus's server, so that what other
// nodes commit after it returns wakes them. Without a bus, or on one that subscribes
// synchronously (bus.Memory), it returns at once. A bus that does not answer within a
// second is not waited for: its wake-ups are lost until it is back, and readers catch up
// by their next sync.
func (s *Service) AwaitSubscriptions() {
	if s.cluster != nil {
		s.cluster.flush()
	}
}

// flush is AwaitSubscriptions.
func (c *cluster) flush() {
	if f, ok := c.bus.(interface{ Flush(time.Duration) error }); ok {
		_ = f.Flush(flushTimeout)
	}
}

// pushReceiptsTo hands userID's connections, on every node, a receipts push of convID
// with rs: a frame that is in no log. The other nodes get the counts, and encode the frame
// themselves.
func (s *Service) pushReceiptsTo(userID, convID string, rs []protocol.Receipts) {
	b, ok := receiptsBody(convID, rs)
	if !ok {
		return
	}
	s.hub.Publish(userID, []hub.Event{{Body: b}})
	if s.cluster != nil {
		s.cluster.ephemeral(userID, convID, rs)
	}
}
