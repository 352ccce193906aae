// Package hub delivers committed sync events to the subscribers of one process: the open
// WebSocket connections and waiting long-polls of each user. It holds no state that matters
// for correctness: a subscriber that misses an event (overflow, reconnect) re-reads the
// durable log by cursor, so the hub never blocks a publisher.
package hub

import (
	"encoding/json"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/protocol"
)

// Event is a committed sync event as the hub hands it to one user's subscribers: its cursor
// in that user's log, and the rest of it, which every recipient of one fanout (a message to
// each member of a group) shares.
//
// An event without a Body is a wake-up from another node: the user's log has an event at
// Cursor, which the subscriber reads from the store (the gateway's gap filling does).
type Event struct {
	Cursor int64
	*Body
}

// Body is an event apart from its cursor. A subscriber that turns it into bytes (the
// WebSocket push frame) does so once for all the recipients of a fanout, through Encoded.
// Neither the publisher nor subscribers may modify it once published.
type Body struct {
	Type   string
	ConvID string
	TS     int64
	Data   json.RawMessage
	// Skip names, for a room's message push (Message), the users whose subscriptions it is
	// not pushed to: the members a message mentions have it as an event in their log, which
	// reaches their connections anyway.
	Skip []string

	once    sync.Once // guards encoded
	encoded []byte
}

// Encoded returns encode(b), calling encode only for the first caller: the others get the
// same bytes, which they must not modify. Every caller must pass the same encoding.
func (b *Body) Encoded(encode func(*Body) []byte) []byte {
	b.once.Do(func() { b.encoded = encode(b) })
	return b.encoded
}

// EventOf returns ev as an Event with a Body of its own.
func EventOf(ev *protocol.SyncEvent) Event {
	return Event{Cursor: ev.Cursor, Body: &Body{Type: ev.Type, ConvID: ev.ConvID, TS: ev.TS, Data: ev.Data}}
}

// Reasons a subscription ends.
var (
	// ErrOverflow: the subscriber fell behind by more than its buffer.
	ErrOverflow = errors.New("hub: subscriber too slow")
	// ErrKicked: the user's tokens were revoked.
	ErrKicked = errors.New("hub: tokens revoked")
	// ErrClosed: the subscriber closed it, or the hub shut down.
	ErrClosed = errors.New("hub: closed")
	// ErrReplaced: a newer connection of the same device opened (Replace).
	ErrReplaced = errors.New("hub: replaced by a newer connection of the device")
)

// Hub routes events to subscriptions by user. The zero value is not usable; call New.
//
// Users are spread over shards, each with its own lock, so that the publishes of concurrent
// sends (one per member of each conversation) and the subscribes and closes of connecting
// clients do not all queue on one mutex (BenchmarkPublishFanout).
type Hub struct {
	seed   maphash.Seed // of shardOf's hash
	shards [hubShards]shard
	convs  convWatches // read-fanout conversations' wake-ups (convwatch.go)
	rooms  rooms       // read-fanout conversations' live delivery (rooms.go)
	nextID atomic.Uint64

	interest Interest // nil on a single node (interest.go)
}

// hubShards is how many shards a hub has: a power of two, well above the number of cores.
const hubShards = 64

// shard holds the subscriptions of the users whose id hashes to it.
type shard struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[*Subscription]struct{}
	_    [64 - 16]byte // a shard to a cache line: neighbouring locks do not contend
}

// New returns an empty hub.
func New() *Hub {
	h := &Hub{seed: maphash.MakeSeed(), convs: convWatches{seed: maphash.MakeSeed()}, rooms: rooms{seed: maphash.MakeSeed(), now: time.Now, typingNow: time.Now}}
	for i := range h.shards {
		h.shards[i].subs = make(map[string]map[*Subscription]struct{})
	}
	for i := range h.rooms.shards {
		h.rooms.shards[i].rooms = make(map[string]*room)
	}
	return h
}

// shardOf returns the shard of userID.
func (h *Hub) shardOf(userID string) *shard {
	return &h.shards[maphash.String(h.seed, userID)%hubShards]
}

// Subscription receives the events published for one user after it was created: through
// a channel (Subscribe), or through a queue that is read with Take and announced by a
// function (Watch).
type Subscription struct {
	id     uint64 // in order of creation: notice rounds wake subscriptions in this order
	hub    *Hub
	shard  *shard
	userID string
	device string        // WatchDevice's device, "" otherwise
	since  int64         // WatchDevice's opening time, for Replace
	gen    int64         // WatchDevice's token generation, for KickBelow; 0 otherwise
	ch     chan *Event   // Subscribe's; nil for Watch's
	notify func()        // Watch's; nil for Subscribe's
	limit  int           // Watch's: most events queued
	done   chan struct{} // Subscribe's; nil for Watch's, whose subscriber is notified instead

	mu      sync.Mutex // guards err, queue and notices; done is closed exactly once, when err is set
	err     error
	queue   Queue[*Event] // Watch's events not yet taken
	notices Queue[Notice] // Watch's notices not yet taken, one per conversation (rooms.go)

	fmu       sync.Mutex      // guards following and opened (rooms.go); taken before any room's lock
	following map[string]bool // the read-fanout conversations whose room s is in
	opened    map[string]bool // the conversations s's connection has open
}

// Subscribe registers a subscription for userID with room for buffer pending events, which
// Events delivers.
func (h *Hub) Subscribe(userID string, buffer int) *Subscription {
	s := &Subscription{ch: make(chan *Event, max(buffer, 1)), done: make(chan struct{})}
	h.add(userID, s)
	return s
}

// Watch registers a subscription for userID that queues up to limit pending events, which
// Take returns, and calls notify after it has queued events and when it ends (Err then says
// why). notify runs with the hub's lock held, on the publisher's goroutine: it must return
// at once and must not call the hub.
//
// Watch is for a subscriber without a goroutine of its own waiting on a channel (an idle
// WebSocket). Its queue exists only while events wait, where Subscribe's channel holds its
// whole buffer for as long as it is open (2 KiB for 256 events, on every idle connection),
// and it has neither Events nor Done channel.
func (h *Hub) Watch(userID string, limit int, notify func()) *Subscription {
	return h.WatchDevice(userID, "", 0, 0, limit, notify)
}

// WatchDevice is Watch for the connection of one device of userID, opened at since (Unix
// nanoseconds) with a token of generation gen: Replace ends it when a newer connection of
// the device opens on another node, KickBelow when tokens of gen are revoked.
func (h *Hub) WatchDevice(userID, deviceID string, since, gen int64, limit int, notify func()) *Subscription {
	s := &Subscription{limit: max(limit, 1), notify: notify, device: deviceID, since: since, gen: gen}
	h.add(userID, s)
	return s
}

// add registers s, a new subscription, for userID.
func (h *Hub) add(userID string, s *Subscription) {
	sh := h.shardOf(userID)
	s.hub, s.shard, s.userID = h, sh, userID
	s.id = h.nextID.Add(1)
	sh.mu.Lock()
	m := sh.subs[userID]
	if m == nil {
		m = make(map[*Subscription]struct{})
		sh.subs[userID] = m
		if h.interest != nil {
			h.interest.User(userID, true)
		}
	}
	m[s] = struct{}{}
	sh.mu.Unlock()
}

// Publish hands events (one user's, ascending by cursor) to every subscription of userID.
// It never blocks: a subscription without room is ended with ErrOverflow. Subscribers
// receive pointers into events, shared among them: neither they nor the caller may modify
// the events afterwards. (Pointers keep an idle subscription's buffer small: 8 bytes a slot.)
func (h *Hub) Publish(userID string, events []Event) {
	if len(events) == 0 {
		return
	}
	sh := h.shardOf(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for s := range sh.subs[userID] {
		if !s.offer(events) {
			sh.endLocked(s, ErrOverflow)
		}
	}
}

// offer hands events to s, or reports false when s has no room for them all.
func (s *Subscription) offer(events []Event) bool {
	if s.ch != nil {
		for i := range events {
			select {
			case s.ch <- &events[i]:
			default:
				return false
			}
		}
		return true
	}
	ok := s.queueEvents(events)
	if ok {
		s.notify()
	}
	return ok
}

// queueEvents adds events to the queue of s, a subscription made by Watch, without notifying
// it, or reports false when it has no room for them all.
func (s *Subscription) queueEvents(events []Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.queue.Len()+len(events) <= s.limit
	if ok {
		s.queue.Grow(len(events)) // exactly that, most often one event to an idle subscriber
		for i := range events {
			s.queue.Push(&events[i])
		}
	}
	return ok
}

// WakeAll hands every subscription a wake-up (an event without a Body) at cursor, so that
// each reads its user's log from where it is: after the bus between nodes was down, the
// wake-ups of the events committed meanwhile on other nodes were lost. A subscription
// without room is ended with ErrOverflow, as by Publish.
func (h *Hub) WakeAll(cursor int64) {
	ev := []Event{{Cursor: cursor}}
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, subs := range sh.subs {
			for s := range subs {
				if !s.offer(ev) {
					sh.endLocked(s, ErrOverflow)
				}
			}
		}
		sh.mu.Unlock()
	}
}

// Kick ends every subscription of userID with ErrKicked.
func (h *Hub) Kick(userID string) {
	sh := h.shardOf(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for s := range sh.subs[userID] {
		sh.endLocked(s, ErrKicked)
	}
}

// KickBelow ends with ErrKicked the subscriptions of userID whose token generation is
// below gen (those made without one, long-polls, included): a revocation another node
// made, once the store confirmed gen. The others hold tokens minted after it.
func (h *Hub) KickBelow(userID string, gen int64) {
	sh := h.shardOf(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for s := range sh.subs[userID] {
		if s.gen < gen {
			sh.endLocked(s, ErrKicked)
		}
	}
}

// Replace ends with ErrReplaced the subscriptions of userID made by WatchDevice for
// deviceID before since (Unix nanoseconds): the device opened a newer connection elsewhere.
func (h *Hub) Replace(userID, deviceID string, since int64) {
	sh := h.shardOf(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for s := range sh.subs[userID] {
		if s.device == deviceID && s.since < since {
			sh.endLocked(s, ErrReplaced)
		}
	}
}

// Online reports whether userID has a subscription here (a WebSocket or a long-poll).
func (h *Hub) Online(userID string) bool {
	sh := h.shardOf(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.subs[userID]) > 0
}

// Subscribers returns how many subscriptions are open, for metrics.
func (h *Hub) Subscribers() int {
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for _, m := range sh.subs {
			n += len(m)
		}
		sh.mu.Unlock()
	}
	return n
}

// endLocked removes s and records why. sh.mu must be held.
func (sh *shard) endLocked(s *Subscription, err error) {
	m := sh.subs[s.userID]
	if _, ok := m[s]; !ok {
		return
	}
	delete(m, s)
	if len(m) == 0 {
		delete(sh.subs, s.userID)
		if s.hub.interest != nil {
			s.hub.interest.User(s.userID, false)
		}
	}
	s.mu.Lock()
	s.err = err
	if s.done != nil {
		close(s.done)
	}
	s.mu.Unlock()
	if s.notify != nil {
		s.notify()
	}
}

// Events delivers the published events in publish order. It is nil for a subscription made
// by Watch.
func (s *Subscription) Events() <-chan *Event { return s.ch }

// Take returns the events queued for a subscription made by Watch, in publish order, or nil
// if there are none, as Queue.Take does: a subscriber that hands back, cleared, the slice it
// took last allocates nothing while busy, and an idle one holds no slice.
func (s *Subscription) Take(spare []*Event) []*Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Take(spare)
}

// Done is closed when the subscription ends; Err then says why. Events already buffered
// stay readable from Events. It is nil for a subscription made by Watch.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended, or nil while it is open.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription with ErrClosed, and its memberships of rooms. It is safe to
// call more than once.
func (s *Subscription) Close() {
	s.shard.mu.Lock()
	s.shard.endLocked(s, ErrClosed)
	s.shard.mu.Unlock()
	s.hub.unfollowAll(s)
}
