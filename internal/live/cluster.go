package live

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/tasks"
	"github.com/parleychat/parley/protocol"
)

// Cluster links this node's live state to the other nodes' through a bus, when there are
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
//   - Both carry typing changes (typing.go), in no log: a user's, a write-fanout
//     conversation's push for their connections; a conversation's, a read-fanout change
//     for the rooms, which time and coalesce it themselves.
//   - One subject for all, revokeSubject, carries revocations: every node drops its cached
//     token generation of the user and kicks the user's subscriptions. Each node subscribes
//     for its whole life, since any node may have a generation cached.
//
// Without a bus (one node) chat.Service has no Cluster, and none of this costs anything.
// What the other nodes tell of the state chat owns (positions, members, recalls,
// revocations) is handed to chat through Changes and Revocations, and what must be checked
// against the store is asked through Conversations, so that live never imports chat.
type Cluster struct {
	bus   bus.Bus
	hub   *hub.Hub
	node  string       // this node's id: a node ignores what it published itself
	tasks *tasks.Group // owns the room checks; its context bounds publishes and bus-driven reads
	now   func() time.Time
	log   *slog.Logger
	obs   any // may implement busObserver and busRejecter

	convs       Conversations
	changes     Changes
	revocations Revocations

	mu   sync.Mutex // guards subs; taken after the lock of any holder (hub shard, counts shard, recent)
	subs map[string]*busInterest

	rmu         sync.Mutex           // guards roomChecked; taken last
	roomChecked map[string]time.Time // rooms here -> when their followers' membership was last checked (checkRoom)

	failures atomic.Int64 // publishes refused since the last warning
	lastWarn atomic.Int64 // Unix nanoseconds of the last warning
}

// Conversations is what a Cluster checks against the store before it acts on a message of
// the bus. chat.Service provides it; both methods read under ctx and may be called
// concurrently, from the bus's delivery goroutines and from ClusterOptions.Tasks.
type Conversations interface {
	// NotMembers returns those of users who are no longer members of convID.
	NotMembers(ctx context.Context, convID string, users []string) ([]string, error)
	// MaxSeq returns convID's newest seq in the store; an error if it cannot be read.
	MaxSeq(ctx context.Context, convID string) (int64, error)
}

// Changes receives what other nodes committed of a conversation that this node's state
// follows, once the message is checked. chat.Service provides it; its methods are called
// on the bus's delivery goroutines and must not block for long.
type Changes interface {
	// PositionsRaised: userID's positions in convID are at least read and delivered.
	PositionsRaised(convID, userID string, read, delivered int64)
	// MembersChanged: members joined or left convID.
	MembersChanged(convID string)
	// Recalled: a message of convID was recalled.
	Recalled(convID string)
}

// Revocations receives revocations another node announced, once checked: userID's tokens
// below gen are revoked. It is a hint, never believed as it is: chat.Service reads the
// generation from the store before it closes anything. Called on the bus's delivery
// goroutine.
type Revocations interface {
	Revoked(userID string, gen int64)
}

// ClusterOptions are the dependencies of a Cluster; all are required but Now, Logger and
// Observer.
type ClusterOptions struct {
	Bus  bus.Bus
	Hub  *hub.Hub
	Node string // this node's id, in the form of a client_msg_id (chat gives "n_" and random)
	// Tasks owns the Cluster's background work and bounds its publishes and reads: its
	// owner closes it before the bus.
	Tasks         *tasks.Group
	Now           func() time.Time // default time.Now
	Logger        *slog.Logger     // default slog.Default()
	Observer      any              // may also implement BusPublishFailed() and BusRejected(reason)
	Conversations Conversations
	Changes       Changes
	Revocations   Revocations
}

// revokeSubject is the subject of revocations, which every node receives.
const revokeSubject = "parley.revoke"

// CacheTTL bounds how long a node uses the read counts and recent messages it holds when
// it is one of several: a raise or a recall on another node whose bus message it missed
// is seen once they are read again from the store.
const CacheTTL = time.Minute

// warnEvery is the least time between two warnings of publishes the bus refused.
const warnEvery = 10 * time.Second

// Holder is one kind of this node's state of a user or conversation that wants the subject.
type Holder uint8

// The holders: the hub's are the Cluster's own (hub.Interest), the others chat's.
const (
	holdUser     Holder = 1 << iota // the hub's subscriptions of the user
	holdRoom                        // the hub's room of the conversation
	holdWatch                       // long-polls watching the conversation
	HoldCounts                      // its read counts, built or being built
	HoldRecent                      // its recent messages
	HoldReceipts                    // its senders' receipts pushes
)

// busInterest is this node's subscription to one subject, for as long as a holder wants it.
type busInterest struct {
	holders Holder
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
	kindTyping    = "y" // user: User typed (Type "started" or "stopped") in Conv; conv: User typed there
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

// NewCluster joins this node to the other nodes on o.Bus.
func NewCluster(o ClusterOptions) *Cluster {
	c := &Cluster{bus: o.Bus, hub: o.Hub, node: o.Node, tasks: o.Tasks, now: o.Now, log: o.Logger, obs: o.Observer,
		convs: o.Conversations, changes: o.Changes, revocations: o.Revocations,
		subs: make(map[string]*busInterest), roomChecked: make(map[string]time.Time)}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if _, err := c.bus.Subscribe(revokeSubject, c.onRevoke); err != nil { // for the bus's life
		c.log.Error("bus: subscribe to revocations", "err", err)
	}
	if r, ok := c.bus.(reconnector); ok {
		r.OnReconnect(c.reconnected)
	}
	c.Flush()
	return c
}

// reconnector is a bus that reports a reconnection (bus.NATS).
type reconnector interface{ OnReconnect(func()) }

// reconnected makes up for the wake-ups lost while the bus was down: every connection and
// long-poll of this node reads its log from its cursor (a wake-up ahead of any cursor),
// once the subscriptions are back on the server, so that nothing committed meanwhile waits
// for the user's next event.
func (c *Cluster) reconnected() {
	c.Flush()
	c.hub.WakeAll(math.MaxInt64)
	c.log.Info("bus: reconnected; every connection reads its log again")
}

// User implements hub.Interest.
func (c *Cluster) User(userID string, on bool) {
	c.hold(bus.UserSubject(userID), holdUser, on, func(d []byte) { c.onUser(userID, d) })
}

// Room implements hub.Interest.
func (c *Cluster) Room(convID string, on bool) {
	c.HoldConv(convID, holdRoom, on)
	c.rmu.Lock()
	if on {
		c.roomChecked[convID] = c.now() // its followers were members when they followed
	} else {
		delete(c.roomChecked, convID)
	}
	c.rmu.Unlock()
}

// ConvWatch implements hub.Interest.
func (c *Cluster) ConvWatch(convID string, on bool) { c.HoldConv(convID, holdWatch, on) }

var _ hub.Interest = (*Cluster)(nil)

// HoldConv records whether holder h wants convID's subject.
func (c *Cluster) HoldConv(convID string, h Holder, on bool) {
	c.hold(bus.ConvSubject(convID), h, on, func(d []byte) { c.onConv(convID, d) })
}

// hold records whether holder h wants subject: the node subscribes (with handler) when the
// first holder wants it and unsubscribes when the last no longer does. Recording what is
// already recorded changes nothing.
func (c *Cluster) hold(subject string, h Holder, on bool, handler func([]byte)) {
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
			c.log.Error("bus: subscribe", "subject", subject, "err", err)
		}
		in.sub = sub
		c.subs[subject] = in
	}
	in.holders |= h
}

// publish sends m on subject. A refusal (NATS unreachable) is counted and logged now and
// then, and otherwise ignored: the readers on other nodes get what it announced on their
// next sync.
func (c *Cluster) publish(subject string, m busMsg) {
	m.Node = c.node
	data, err := json.Marshal(m)
	if err != nil {
		c.log.Error("bus: encode", "kind", m.Kind, "err", err) // cannot happen: strings, numbers and JSON frames
		return
	}
	c.send(subject, data)
}

// send publishes data, an encoded busMsg, on subject, as publish does.
func (c *Cluster) send(subject string, data []byte) {
	err := c.bus.Publish(c.tasks.Context(), subject, data)
	if err == nil || errors.Is(err, bus.ErrClosed) {
		return
	}
	if o, ok := c.obs.(busObserver); ok {
		o.BusPublishFailed()
	}
	n := c.failures.Add(1)
	now, last := time.Now().UnixNano(), c.lastWarn.Load()
	if now-last >= int64(warnEvery) && c.lastWarn.CompareAndSwap(last, now) {
		c.failures.Add(-n)
		c.log.Warn("bus: publish failed; readers on other nodes catch up on their next sync",
			"subject", subject, "err", err, "failed", n)
	}
}

// decode reads a message of another node; ok is false for this node's own and for garbage,
// which is counted.
func (c *Cluster) decode(data []byte) (m busMsg, ok bool) {
	if err := json.Unmarshal(data, &m); err != nil {
		c.reject(rejectMalformed)
		return m, false
	}
	return m, m.Node != c.node
}

// ---- what this node tells the others ----

// Wake tells the other nodes that userID's log has an event at cursor. It is the one
// Message sent per recipient of a send (500 for a message to a group of 500, before the
// ack), so it is encoded by hand rather than by encoding/json: the same bytes, without
// reflection.
func (c *Cluster) Wake(userID string, cursor int64) {
	buf := make([]byte, 0, 48+len(c.node))
	buf = append(buf, `{"n":"`...)
	buf = append(buf, c.node...) // [a-z0-9_]: no escaping
	buf = append(buf, `","k":"`+kindWake+`","c":`...)
	buf = strconv.AppendInt(buf, cursor, 10)
	buf = append(buf, '}')
	c.send(bus.UserSubject(userID), buf)
}

// Event tells the other nodes that userID's log has the event b at cursor, with b: a
// message event, whose payload the send has encoded once already. A connection on another
// node that has pushed up to cursor-1 pushes it at once, as from its own node's hub, where
// a bare wake-up would cost it a read of the log per message (a transaction on the shared
// database for every recipient of every send); one that is further behind fills the gap
// from the log as for a wake-up. It is encoded by hand, as wake is, and the payload is
// JSON already.
func (c *Cluster) Event(userID string, cursor int64, b *hub.Body) {
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

// Ephemeral hands the other nodes a receipts push of convID for userID's connections,
// which is in no log: its counts, rs.
func (c *Cluster) Ephemeral(userID, convID string, rs []protocol.Receipts) {
	c.publish(bus.UserSubject(userID), busMsg{Kind: kindEphemeral, Type: protocol.OpReceipts, Conv: convID, Receipts: rs})
}

// DeviceConnected tells the other nodes that a connection of userID's device deviceID
// opened at since.
func (c *Cluster) DeviceConnected(userID, deviceID string, since int64) {
	c.publish(bus.UserSubject(userID), busMsg{Kind: kindDevice, Device: deviceID, Since: since})
}

// message hands the other nodes' rooms a committed message of a read-fanout conversation,
// payload its encoding.
func (c *Cluster) Message(convID string, seq int64, senderID string, ts int64, payload []byte, inLog []string) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindMessage, Seq: seq, User: senderID, TS: ts, Data: payload, Users: inLog})
}

// Positions tells the other nodes that userID's positions in convID moved.
func (c *Cluster) Positions(convID, userID string, read, delivered int64) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindPositions, User: userID, Read: read, Delivered: delivered})
}

// MembersChanged tells the other nodes that convID's members changed.
func (c *Cluster) MembersChanged(convID string) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindMembers})
}

// Recalled tells the other nodes that a message of convID was recalled.
func (c *Cluster) Recalled(convID string) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindRecall})
}

// Revoke tells every node that userID's tokens below gen are revoked.
func (c *Cluster) Revoke(userID string, gen int64) {
	c.publish(revokeSubject, busMsg{Kind: kindRevoke, User: userID, Gen: gen})
}

// ---- what the others tell this node ----

func (c *Cluster) onUser(userID string, data []byte) {
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
		c.hub.Publish(userID, []hub.Event{{Cursor: m.Cursor}}) // no Body: read the log
	case kindEvent:
		b, ok := c.eventBody(&m)
		if !ok {
			c.reject(rejectInvalid)
			return
		}
		c.hub.Publish(userID, []hub.Event{{Cursor: m.Cursor, Body: b}})
	case kindEphemeral:
		if !receiptsValid(&m) {
			c.reject(rejectInvalid)
			return
		}
		b, ok := ReceiptsBody(m.Conv, m.Receipts)
		if !ok {
			return
		}
		c.hub.Publish(userID, []hub.Event{{Body: b}})
	case kindDevice:
		if !deviceValid(&m, time.Now()) { // the clock Since was read on
			c.reject(rejectInvalid)
			return
		}
		c.hub.Replace(userID, m.Device, m.Since)
	case kindTyping:
		c.onUserTyping(userID, &m)
	default:
		c.reject(rejectInvalid)
	}
}

func (c *Cluster) onConv(convID string, data []byte) {
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
		if c.hub.Followed(convID) {
			c.hub.Message(convID, m.Seq, m.User, b)
			c.CheckRoom(convID)
		}
		c.hub.NotifyConversation(convID)
	case kindPositions:
		if !protocol.ValidUserID(m.User) || m.Read < 0 || m.Read > protocol.MaxSafeInteger ||
			m.Delivered < 0 || m.Delivered > protocol.MaxSafeInteger {
			c.reject(rejectInvalid)
			return
		}
		c.changes.PositionsRaised(convID, m.User, m.Read, m.Delivered)
	case kindMembers:
		c.changes.MembersChanged(convID)
	case kindRecall:
		c.changes.Recalled(convID)
	case kindTyping:
		c.onRoomTyping(convID, &m)
	default:
		c.reject(rejectInvalid)
	}
}

// onRevoke checks a revocation from another node and hands it to Revocations, which takes
// it as a hint (chat.Service reads the generation from the store).
func (c *Cluster) onRevoke(data []byte) {
	m, ok := c.decode(data)
	if !ok {
		return
	}
	if m.Kind != kindRevoke || !protocol.ValidUserID(m.User) || !validPos(m.Gen) {
		c.reject(rejectInvalid)
		return
	}
	c.revocations.Revoked(m.User, m.Gen)
}

// Healthy reports whether the bus carries messages: an error while it cannot (NATS
// unreachable: the node keeps serving, and its readers catch up by sync).
func (c *Cluster) Healthy() error {
	if h, ok := c.bus.(interface{ Healthy() error }); ok {
		return h.Healthy()
	}
	return nil
}

// flushTimeout bounds Flush's wait for the bus's server.
const flushTimeout = time.Second

// Flush returns once the bus subscriptions this node made so far reach the bus's server
// (chat.Service.AwaitSubscriptions), or after a second.
func (c *Cluster) Flush() {
	if f, ok := c.bus.(interface{ Flush(time.Duration) error }); ok {
		_ = f.Flush(flushTimeout)
	}
}

// CheckRoom has the followers of convID's room here checked against the store's members
// once CacheTTL has passed since the last check, while messages come (on a goroutine of
// its own). A removed member's connections unfollow the room when they push the removal
// from their log; on one of several nodes the wake-up of that event may be lost on the bus,
// and the room would push the group's messages to them until their next event. The check
// bounds that to CacheTTL.
func (c *Cluster) CheckRoom(convID string) {
	now := c.now()
	c.rmu.Lock()
	last, ok := c.roomChecked[convID]
	due := ok && now.Sub(last) >= CacheTTL
	if due {
		c.roomChecked[convID] = now
	}
	c.rmu.Unlock()
	if due {
		c.tasks.Go(func(ctx context.Context) { c.verifyRoom(ctx, convID) })
	}
}

// verifyRoom unfollows convID's room here for the followers who are no longer members.
func (c *Cluster) verifyRoom(ctx context.Context, convID string) {
	users := c.hub.RoomUsers(convID)
	if len(users) == 0 {
		return
	}
	gone, err := c.convs.NotMembers(ctx, convID, users)
	if err != nil {
		c.log.Warn("bus: check a room's followers", "conv", convID, "err", err)
		return
	}
	for _, u := range gone {
		c.hub.UnfollowUser(convID, u)
	}
}
