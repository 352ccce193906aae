package hub

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"
)

// Rooms deliver the messages of read-fanout conversations (large groups) live, without a
// storm (docs/design.md, "Large groups"). A message there is in no member's log, so the
// hub cannot publish it per user. Instead each conversation with members online in this
// process has a room: the WebSocket subscriptions of its members (Follow), some of which
// have the conversation open (OpenConversation). A message (Message) is handed, one Body shared by all,
// to the open subscriptions, in seq order; every other subscription gets a notice
// (conversation, max_seq, unread) at most once per NoticeInterval, built when the room's
// round runs: a burst of 100 messages is one notice per connection, not 100.
//
// Lock order: a subscription's follow lock (fmu), then a room shard's lock, then the
// subscription's queue lock (mu). Rounds and messages take the last two only.

// NoticeInterval is the shortest time between two notice rounds of one room, so between
// two notices of one conversation to one connection.
const NoticeInterval = time.Second

// maxPending bounds the out-of-order messages a room holds while it waits for a seq that is
// late; past it the room skips the gap, which the clients fill by history.
const maxPending = 64

// gapWait bounds how long a room waits for a seq that is late before it skips it. On one
// node a late seq is a send whose commit overtook another's and comes within microseconds;
// from other nodes (the bus is at most once) it may never come, and the messages after it
// must not wait for 64 more.
const gapWait = 500 * time.Millisecond

// Notice tells a connection that a read-fanout conversation it does not have open has new
// messages: the newest seq, and how many of those the user has not read.
type Notice struct {
	ConvID string
	MaxSeq int64
	Unread int64
}

type roomShard struct {
	mu    sync.Mutex
	rooms map[string]*room
}

type rooms struct {
	seed   maphash.Seed
	shards [watchShards]roomShard
	now    func() time.Time
	manual bool // the wheel turns only when a test calls round

	typingNow func() time.Time // typing's clock (typing.go)
}

func (r *rooms) shardOf(convID string) *roomShard {
	return &r.shards[maphash.String(r.seed, convID)%watchShards]
}

// room is one conversation's live state in this process. Guarded by its shard's lock.
type room struct {
	id          string
	members     map[string]map[*Subscription]*follow // user -> their subscriptions following it
	open        map[*Subscription]struct{}
	next        int64                                 // the seq to hand to the open subscriptions next; 0 before the first message
	known       bool                                  // maxSeq was read from the store (Follow), not only learnt from messages
	pending     map[int64]*Body                       // messages that came before their predecessor
	gapSince    time.Time                             // when next was first found missing; zero if it is not
	recent      []roomMessage                         // the newest messages handed over, oldest first, for late followers
	maxSeq      int64                                 // the newest seq known
	tick        int64                                 // the notice wheel's next tick
	quiet       int64                                 // ticks since the last message
	lastMessage time.Time                             // when the last message came
	timer       *time.Timer                           // the wheel's next tick, while it turns
	followers   int                                   // subscriptions in members
	slots       [wheelSlots]map[*Subscription]*follow // the followers by wheel slot
	typing      roomTyping                            // who types (typing.go)
}

// roomMessage is a message a room has handed to its open subscriptions.
type roomMessage struct {
	seq  int64
	body *Body
}

// recentKept is how many of the newest messages a room keeps for a subscription that
// follows it late: a connection that learns of a group's switch from its log (the
// conv_updated event) follows the room only when it pushes that event, and the messages
// sent between the switch and then are pushed to it from here.
const recentKept = 64

// follow is one subscription's membership of a room.
type follow struct {
	seen     int64 // the user's max(read_seq, visible_from): unread = maxSeq - seen
	notified int64 // the max_seq of the last notice queued to it
	lastTick int64 // the wheel tick of its last notice
	slot     int64 // its tick in each turn of the wheel, in a large room
	open     bool
}

// Follow makes s, a subscription made by Watch, a follower of the read-fanout conversation
// convID: from now on it gets the conversation's notices, and its pushes while it has the
// conversation open. seen is the user's max(read_seq, visible_from), maxSeq the newest seq
// the caller knows of (the notices are of seqs above it). Following again only raises seen.
func (h *Hub) Follow(s *Subscription, convID string, seen, maxSeq int64) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.following == nil {
		s.following = make(map[string]bool)
	}
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.roomLocked(h, convID)
	rm.maxSeq = max(rm.maxSeq, maxSeq)
	rm.known = true
	subs := rm.members[s.userID]
	if subs == nil {
		subs = make(map[*Subscription]*follow)
		rm.members[s.userID] = subs
	}
	f := subs[s]
	if f == nil {
		f = &follow{seen: seen, notified: maxSeq, lastTick: rm.tick - wheelSlots, slot: int64(s.id % wheelSlots)}
		subs[s] = f
		rm.slot(f.slot)[s] = f
		rm.followers++
	}
	f.seen = max(f.seen, seen)
	f.notified = max(f.notified, maxSeq)
	s.following[convID] = true
	if s.opened[convID] && !f.open {
		f.open = true
		rm.open[s] = struct{}{}
		rm.replay(s, maxSeq)
	}
	if !f.open && rm.maxSeq > f.notified {
		rm.schedule(h)
	}
}

// replay hands s the kept messages after seq, in seq order.
func (rm *room) replay(s *Subscription, after int64) {
	var w wakes
	for _, m := range rm.recent {
		if m.seq > after && !slices.Contains(m.body.Skip, s.userID) {
			w.queue(s, []Event{{Body: m.body}})
		}
	}
	w.wakeLater()
}

// schedule makes sure the notice wheel turns: its next tick runs at once if it was
// stopped. The tick count goes on where it stopped, so a follower's ticks stay at least a
// turn apart.
func (rm *room) schedule(h *Hub) {
	rm.quiet = 0
	if rm.timer == nil && !h.rooms.manual {
		rm.timer = time.AfterFunc(0, func() { h.round(rm.id, rm) })
	}
}

// slot returns the followers of wheel slot i, made if it has none.
func (rm *room) slot(i int64) map[*Subscription]*follow {
	if rm.slots[i] == nil {
		rm.slots[i] = make(map[*Subscription]*follow)
	}
	return rm.slots[i]
}

// roomLocked returns convID's room, made if there is none. sh.mu must be held.
func (sh *roomShard) roomLocked(h *Hub, convID string) *room {
	rm := sh.rooms[convID]
	if rm == nil {
		rm = &room{id: convID, members: make(map[string]map[*Subscription]*follow), open: make(map[*Subscription]struct{}), pending: make(map[int64]*Body)}
		sh.rooms[convID] = rm
		if h.interest != nil {
			h.interest.Room(convID, true)
		}
	}
	return rm
}

// closeRoomLocked forgets convID's room. sh.mu must be held.
func (sh *roomShard) closeRoomLocked(h *Hub, convID string) {
	delete(sh.rooms, convID)
	if h.interest != nil {
		h.interest.Room(convID, false)
	}
}

// Unfollow ends s's membership of convID's room (the user left the conversation).
func (h *Hub) Unfollow(s *Subscription, convID string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	h.unfollowLocked(s, convID)
}

// unfollowLocked is Unfollow with s.fmu held.
func (h *Hub) unfollowLocked(s *Subscription, convID string) {
	if !s.following[convID] {
		return
	}
	delete(s.following, convID)
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	if rm == nil {
		return
	}
	delete(rm.open, s)
	if subs := rm.members[s.userID]; subs != nil {
		if f := subs[s]; f != nil {
			delete(subs, s)
			delete(rm.slots[f.slot], s)
			rm.followers--
		}
		if len(subs) == 0 {
			delete(rm.members, s.userID)
		}
	}
	if len(rm.members) == 0 && rm.timer == nil {
		sh.closeRoomLocked(h, convID) // else its round decides (see idleRoom)
	}
}

// Seen raises what s's user has seen of convID (a read on one of their devices), if s
// follows it.
func (h *Hub) Seen(s *Subscription, convID string, seen int64) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if !s.following[convID] {
		return
	}
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rm := sh.rooms[convID]; rm != nil {
		if f := rm.members[s.userID][s]; f != nil {
			f.seen = max(f.seen, seen)
		}
	}
}

// OpenConversation records that s's connection shows convID: while it follows the conversation, its
// messages are pushed to s in full instead of notices. It returns how many conversations s
// has open, this one included. Opening an open conversation changes nothing.
func (h *Hub) OpenConversation(s *Subscription, convID string) int {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.opened == nil {
		s.opened = make(map[string]bool)
	}
	s.opened[convID] = true
	if s.following[convID] {
		h.setOpen(s, convID, true)
	}
	return len(s.opened)
}

// CloseConversation undoes OpenConversation. Closing a conversation that is not open changes nothing.
func (h *Hub) CloseConversation(s *Subscription, convID string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if !s.opened[convID] {
		return
	}
	delete(s.opened, convID)
	if s.following[convID] {
		h.setOpen(s, convID, false)
	}
}

// Opened returns how many conversations s has open and whether convID is one of them.
func (s *Subscription) Opened(convID string) (n int, open bool) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return len(s.opened), s.opened[convID]
}

// setOpen sets s's open flag in convID's room. s.fmu must be held, and s must follow convID.
func (h *Hub) setOpen(s *Subscription, convID string, open bool) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	if rm == nil {
		return
	}
	f := rm.members[s.userID][s]
	if f == nil {
		return
	}
	f.open = open
	if open {
		rm.open[s] = struct{}{}
	} else {
		delete(rm.open, s)
		f.notified = rm.maxSeq // what was pushed while open needs no notice
	}
}

// unfollowAll ends every membership of s (its subscription closed).
func (h *Hub) unfollowAll(s *Subscription) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for convID := range s.following {
		h.unfollowLocked(s, convID)
	}
	s.opened = nil
}

// idleRoom is how long a room without followers is kept after its last message: a
// connection that follows it late (see recentKept) finds the messages it missed there.
const idleRoom = 5 * time.Second

// Message hands a committed message of the read-fanout conversation convID, with seq, sent
// by senderID, to the conversation's room: body (an ephemeral event, Cursor 0, whose Data
// is the whole push frame) to the subscriptions that have it open, in seq order (but those
// of the users in body.Skip, who have the message in their log), and a
// notice round to the others, at once if the last one ran NoticeInterval ago or more, else
// when it will have. The sender's own subscriptions count the message as seen (sending
// reads it). A room is made if the conversation has none, and kept idleRoom after its last
// message even without followers. It never blocks on a subscriber.
//
// The pushes are queued under the room's lock, so in seq order, but their writers are woken
// (a goroutine started for each idle connection) on a goroutine of their own afterwards:
// the send that calls Message waits for neither, however many connections have the
// conversation open.
func (h *Hub) Message(convID string, seq int64, senderID string, body *Body) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	rm := sh.roomLocked(h, convID)
	rm.lastMessage = h.rooms.now()
	for _, f := range rm.members[senderID] {
		f.seen = max(f.seen, seq)
	}
	if rm.next == 0 && rm.known {
		rm.next = rm.maxSeq + 1 // every later seq reaches the room (Follow's listing was before it)
	}
	if seq > rm.maxSeq {
		rm.maxSeq = seq
		rm.schedule(h)
	}
	var w wakes
	rm.deliver(seq, body, h.rooms.now(), &w)
	sh.mu.Unlock()
	w.wakeLater()
}

// wakes collects the subscriptions whose queues got events under a room's lock, to notify
// them once it is released.
type wakes struct{ subs []*Subscription }

// queue queues events to s, or ends s with ErrOverflow when it has no room for them.
func (w *wakes) queue(s *Subscription, events []Event) {
	if !s.queueEvents(events) {
		s.shard.mu.Lock()
		s.shard.endLocked(s, ErrOverflow) // notifies s
		s.shard.mu.Unlock()
		return
	}
	w.subs = append(w.subs, s)
}

// wakeLater notifies the collected subscriptions on a goroutine of its own (pace): with
// many connections each notify starts a writer goroutine, which the caller should not wait
// for.
func (w *wakes) wakeLater() {
	switch len(w.subs) {
	case 0:
	case 1:
		w.subs[0].notify()
	default:
		go pace(w.subs)
	}
}

// pace notifies subs in paceSlices slices, one every paceEvery (a slice has at least
// paceMin of them): each notify makes a writer goroutine runnable, and a thousand of them
// made runnable at once would queue every other goroutine of the process (a send's ack
// among them) behind them for as long as they take to run. So a message's pushes to 1,000
// open connections, or a notice tick's 750 notices, take 16 ms to start instead of one.
func pace(subs []*Subscription) {
	slice := max(paceMin, (len(subs)+paceSlices-1)/paceSlices)
	for len(subs) > 0 {
		n := min(slice, len(subs))
		for _, s := range subs[:n] {
			s.notify()
		}
		if subs = subs[n:]; len(subs) > 0 {
			time.Sleep(paceEvery)
		}
	}
}

const (
	paceSlices = 16
	paceEvery  = time.Millisecond
	paceMin    = 32
)

// deliver queues body, message seq, to the open subscriptions (w wakes them) once every seq
// before it has been handed over: sends commit in seq order but may reach the hub in
// another order. A seq older than the room's first message (the room was made by a message
// and had no followers, so no one missed it) is only kept for late followers; one that kept
// more than maxPending later ones waiting, or has been waited for gapWait (as of now), is
// given up, and clients fill such a gap by history. Guarded by the shard lock.
func (rm *room) deliver(seq int64, body *Body, now time.Time, w *wakes) {
	if rm.next == 0 {
		rm.next = seq
	}
	if seq < rm.next {
		rm.keepLate(seq, body)
		return
	}
	rm.pending[seq] = body
	rm.handOver(now, w)
}

// handOver queues the pending messages that follow the last one handed over, in seq
// order, skipping a gap that waited too long. Guarded by the shard lock.
func (rm *room) handOver(now time.Time, w *wakes) {
	for len(rm.pending) > 0 {
		b := rm.pending[rm.next]
		if b == nil {
			if rm.gapSince.IsZero() {
				rm.gapSince = now
			}
			if len(rm.pending) <= maxPending && now.Sub(rm.gapSince) < gapWait {
				return
			}
			low := int64(-1)
			for s := range rm.pending {
				if low < 0 || s < low {
					low = s
				}
			}
			rm.next = low
			continue
		}
		rm.gapSince = time.Time{}
		delete(rm.pending, rm.next)
		if len(rm.recent) == recentKept {
			rm.recent = append(rm.recent[:0], rm.recent[1:]...)
		}
		rm.recent = append(rm.recent, roomMessage{seq: rm.next, body: b})
		rm.next++
		evs := []Event{{Body: b}}
		for s := range rm.open {
			if !slices.Contains(b.Skip, s.userID) { // the mentioned, who have it in their log
				w.queue(s, evs)
			}
		}
	}
}

// keepLate adds message seq, older than the room's first one, to the messages kept for late
// followers, in its place, unless it is there or older than all of them.
func (rm *room) keepLate(seq int64, body *Body) {
	i := 0
	for i < len(rm.recent) && rm.recent[i].seq < seq {
		i++
	}
	if (i < len(rm.recent) && rm.recent[i].seq == seq) || (i == 0 && len(rm.recent) == recentKept) {
		return
	}
	rm.recent = append(rm.recent, roomMessage{})
	copy(rm.recent[i+1:], rm.recent[i:])
	rm.recent[i] = roomMessage{seq: seq, body: body}
	if len(rm.recent) > recentKept {
		rm.recent = append(rm.recent[:0], rm.recent[1:]...)
	}
}

// Notices go out on a wheel that turns once per NoticeInterval while messages come, in
// wheelSlots ticks: in a large room each follower has a slot (its subscription's id modulo
// wheelSlots) and is noticed at its slot's tick only, so that 15,000 notices are spread
// evenly over the second instead of being sent in one burst that would queue every other
// goroutine of the process (acks among them) behind 15,000 writers, and so that a message
// reaches every follower's notice within one turn. A small room (at most wakeSlice
// followers) notices every eligible follower at each tick. Either way a follower is noticed
// only if a turn of ticks has passed since its last notice, and ticks are at least
// wheelStep apart: at most one notice per conversation per connection per NoticeInterval.
// The wheel stops once a full turn has passed without a message.
const (
	wheelSlots = 20
	wheelStep  = NoticeInterval / wheelSlots
	wakeSlice  = 256
)

// round runs one tick of rm's notice wheel, on a timer of its own, so that a send never
// waits for it: it queues a notice to each eligible follower of rm without the conversation
// open whose last notice was of an older max_seq, then wakes their writers outside the
// room's lock.
func (h *Hub) round(convID string, rm *room) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	var noticed []*Subscription
	var pushed wakes
	defer func() {
		sh.mu.Unlock()
		pushed.wakeLater()
		pace(noticed) // on the tick's own goroutine
	}()
	rm.timer = nil
	if sh.rooms[convID] != rm {
		return // the room closed meanwhile
	}
	if len(rm.pending) > 0 {
		rm.handOver(h.rooms.now(), &pushed) // a gap no later message came to give up
	}
	if len(rm.members) == 0 {
		if idle := h.rooms.now().Sub(rm.lastMessage); idle >= idleRoom {
			sh.closeRoomLocked(h, convID)
		} else {
			rm.timer = time.AfterFunc(idleRoom-idle, func() { h.round(convID, rm) })
		}
		return
	}
	tick := rm.tick
	visit := func(s *Subscription, f *follow) {
		if f.open || f.notified >= rm.maxSeq || tick-f.lastTick < wheelSlots {
			return
		}
		f.notified, f.lastTick = rm.maxSeq, tick
		if s.queueNotice(Notice{ConvID: convID, MaxSeq: rm.maxSeq, Unread: max(0, rm.maxSeq-f.seen)}) {
			noticed = append(noticed, s)
		}
	}
	if rm.followers > wakeSlice {
		for s, f := range rm.slots[tick%wheelSlots] { // a twentieth of them
			visit(s, f)
		}
	} else {
		for i := range rm.slots {
			for s, f := range rm.slots[i] {
				visit(s, f)
			}
		}
	}
	rm.tick++
	if rm.quiet++; rm.quiet <= wheelSlots && !h.rooms.manual {
		rm.timer = time.AfterFunc(wheelStep, func() { h.round(convID, rm) })
	}
}

// queueNotice queues n for s, replacing a notice of the same conversation that waits still,
// and reports whether s is to be notified (it has not ended).
func (s *Subscription) queueNotice(n Notice) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	for i, q := range s.notices.items { // a connection follows few conversations
		if q.ConvID == n.ConvID {
			s.notices.items[i] = n
			return true
		}
	}
	s.notices.Push(n)
	return true
}

// TakeNotices returns the notices queued for s, or nil if there are none, as Queue.Take
// does (spare, emptied, holds the next ones).
func (s *Subscription) TakeNotices(spare []Notice) []Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notices.Take(spare)
}

// Followers returns how many subscriptions follow convID here, and how many have it open.
func (h *Hub) Followers(convID string) (following, open int) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	if rm == nil {
		return 0, 0
	}
	for _, subs := range rm.members {
		following += len(subs)
	}
	return following, len(rm.open)
}

// Followed reports whether a subscription follows convID here.
func (h *Hub) Followed(convID string) bool {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	return rm != nil && rm.followers > 0
}

// Follows reports whether s follows convID's room.
func (s *Subscription) Follows(convID string) bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.following[convID]
}

// RoomUsers returns the users with a subscription here that follows convID's room.
func (h *Hub) RoomUsers(convID string) []string {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rm := sh.rooms[convID]
	if rm == nil {
		return nil
	}
	users := make([]string, 0, len(rm.members))
	for u := range rm.members {
		users = append(users, u)
	}
	return users
}

// UnfollowUser ends the memberships of convID's room of userID's subscriptions here (the
// user is no longer a member, which the node learnt from the store, not from the user's
// log), and hands each a wake-up, so that it reads the user's log, where the reason is.
func (h *Hub) UnfollowUser(convID, userID string) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	var subs []*Subscription
	if rm := sh.rooms[convID]; rm != nil {
		for s := range rm.members[userID] {
			subs = append(subs, s)
		}
	}
	sh.mu.Unlock() // Unfollow takes a subscription's follow lock, which comes first
	for _, s := range subs {
		h.Unfollow(s, convID)
	}
	if len(subs) > 0 {
		h.Publish(userID, []Event{{Cursor: math.MaxInt64}})
	}
}

// RoomSeq returns the newest seq convID's room here knows of, and whether the room read it
// from the store (a Follow) rather than only from messages; known is false without a room.
func (h *Hub) RoomSeq(convID string) (maxSeq int64, known bool) {
	sh := h.rooms.shardOf(convID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rm := sh.rooms[convID]; rm != nil {
		return rm.maxSeq, rm.known
	}
	return 0, false
}
