// Package presence tells who is online: it aggregates the connections of each user's devices,
// on this node and, through a bus, on the others, into one state per user (online, away,
// offline), and hands the changes to the connections that subscribed to them, coalesced
// (docs/design.md, "Presence").
//
// Everything it holds is memory: a node that restarts learns again from the connections
// that come back, and the other nodes' heartbeats. It never decides who may see whom: the
// gateway subscribes a connection only to users it may see (chat.Service.PresenceVisible).
//
// One goroutine per Tracker (run) turns once per Tick: it ends the grace of users whose
// last device left, expires what the other nodes told when their heartbeats stop, sends
// this node's heartbeat and hands the due changes to the watchers. No connection has a
// timer or a goroutine of its own for presence.
package presence

import (
	"strings"
	"sync"
	"time"
)

// State is a user's presence.
type State uint8

// The states, in the order they aggregate: a user is the highest of their devices.
const (
	Offline State = iota
	Away
	Online
)

// String returns the wire name of s.
func (s State) String() string {
	switch s {
	case Online:
		return "online"
	case Away:
		return "away"
	}
	return "offline"
}

// Config is the configuration of a Tracker; the zero value of a field means its default.
type Config struct {
	// Grace is how long a user whose last device left stays as they were, so that a
	// reconnect within it is never seen (default 30 s).
	Grace time.Duration
	// Timeout is how long what another node told is believed after its last heartbeat
	// (default 60 s): a node that dies takes its users offline within it.
	Timeout time.Duration
	// Coalesce is the least time between two changes of one user handed to watchers
	// (default 5 s).
	Coalesce time.Duration
	// Tick is how often the tracker turns, so the least time between two presence frames
	// of one connection (default 1 s).
	Tick time.Duration
	// MaxSubscriptions is how many users one watcher may follow (default 500).
	MaxSubscriptions int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Grace: 30 * time.Second, Timeout: time.Minute, Coalesce: 5 * time.Second,
		Tick: time.Second, MaxSubscriptions: 500}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.Coalesce <= 0 {
		c.Coalesce = d.Coalesce
	}
	if c.Tick <= 0 {
		c.Tick = d.Tick
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = d.MaxSubscriptions
	}
	return c
}

// Entry is one user's presence as a watcher sees it. LastActive is Unix seconds rounded
// down to a minute, 0 when unknown or when the user is online.
type Entry struct {
	UserID     string
	State      State
	LastActive int64
}

// Observer counts what a Tracker does, for metrics; every method may be called with the
// tracker's lock held and must not block.
type Observer interface {
	SetPresenceUsers(n int)  // users with a device connected here
	PresenceFrame(users int) // a batch of users' changes handed to one watcher
	PresenceCoalesced()      // a change held back to keep to Coalesce
}

type nopObserver struct{}

func (nopObserver) SetPresenceUsers(int) {}
func (nopObserver) PresenceFrame(int)    {}
func (nopObserver) PresenceCoalesced()   {}

// Tracker holds the presence of users. Its methods are safe for concurrent use.
type Tracker struct {
	cfg  Config
	now  func() time.Time
	obs  Observer
	node string
	pub  func(msg []byte) // publishes on the bus; nil on a single node

	mu      sync.Mutex // guards everything below; Watcher's notify is called with it held
	users   map[string]*user
	dirty   map[string]struct{} // users whose state may have changed since the last turn
	leaving map[string]struct{} // users here in grace: no device left, not yet offline
	local   int                 // users with a device connected here
	remotes int                 // news of other nodes held, for expiry sweeps
	outbox  []wireEntry         // this node's changes for the bus, published after the turn
	// The numbers subscriptions name users and watchers by: a user has one while watched,
	// a watcher while it follows anyone.
	userNums    numbering[*user]
	watcherNums numbering[*Watcher]

	stop chan struct{}
	done chan struct{}
}

// user is what the tracker knows of one user. It exists while the user has devices here,
// news from other nodes, watchers, or a state handed out that is not offline.
type user struct {
	id       string             // the key of the record in Tracker.users, the one copy kept
	devices  map[string]*device // this node's devices
	leftAt   time.Time          // when the last device here left (grace), zero otherwise
	remote   map[string]remote  // node -> what it told
	watchers watcherSet
	num      uint32 // the user's number while watched (watchers not empty), else 0
	hidden   bool
	told     State     // this node's state of the user last published on the bus
	shown    State     // the state last handed to watchers
	shownAt  time.Time // when
	last     int64     // last active, Unix seconds rounded to a minute
}

type device struct {
	conns int
	away  bool
}

type remote struct {
	state   State
	expires time.Time
}

// New returns a Tracker and starts its goroutine; Close stops it. now may be nil (time.Now).
func New(cfg Config, now func() time.Time, obs Observer) *Tracker {
	if now == nil {
		now = time.Now
	}
	if obs == nil {
		obs = nopObserver{}
	}
	t := &Tracker{cfg: cfg.withDefaults(), now: now, obs: obs, users: make(map[string]*user),
		dirty: make(map[string]struct{}), leaving: make(map[string]struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	go t.run()
	return t
}

// Config returns the tracker's configuration, defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// Close stops the tracker's goroutine.
func (t *Tracker) Close() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}

func (t *Tracker) run() {
	defer close(t.done)
	tk := time.NewTicker(t.cfg.Tick)
	defer tk.Stop()
	beat := t.cfg.Timeout / 3
	var lastBeat time.Time
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
		}
		now := t.now()
		t.Turn(now)
		if t.pub != nil && now.Sub(lastBeat) >= beat {
			lastBeat = now
			t.heartbeat(now)
		}
	}
}

// userLocked returns id's record, made if need be. Lock should be held.
func (t *Tracker) userLocked(id string) *user {
	u := t.users[id]
	if u == nil {
		// A copy of its own: id may be a string decoded from a frame, whose memory the
		// record would otherwise keep for its life.
		id = strings.Clone(id)
		u = &user{id: id}
		t.users[id] = u
	}
	return u
}

// Connected counts a connection of the device (a WebSocket or a waiting long-poll).
func (t *Tracker) Connected(userID, deviceID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.userLocked(userID)
	if u.devices == nil {
		u.devices = make(map[string]*device, 1)
		t.local++
		t.obs.SetPresenceUsers(t.local)
	}
	d := u.devices[deviceID]
	if d == nil {
		d = &device{}
		u.devices[deviceID] = d
	}
	d.conns++
	u.leftAt = time.Time{}
	delete(t.leaving, userID)
	t.changedLocked(u)
}

// Disconnected ends a connection Connected counted. The device's away flag goes with its
// last connection.
func (t *Tracker) Disconnected(userID, deviceID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.users[userID]
	if u == nil || u.devices[deviceID] == nil {
		return
	}
	d := u.devices[deviceID]
	if d.conns--; d.conns > 0 {
		return
	}
	delete(u.devices, deviceID)
	if len(u.devices) == 0 {
		u.devices = nil
		t.local--
		t.obs.SetPresenceUsers(t.local)
		u.leftAt = t.now()
		t.leaving[u.id] = struct{}{} // Turn ends the grace
		return
	}
	t.changedLocked(u)
}

// SetAway sets whether the device says its user is away; it is kept while the device has
// a connection.
func (t *Tracker) SetAway(userID, deviceID string, away bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.users[userID]; u != nil && u.devices[deviceID] != nil {
		u.devices[deviceID].away = away
		t.changedLocked(u)
	}
}

// SetHidden sets whether the user hides their presence (from the store, or a change).
func (t *Tracker) SetHidden(userID string, hidden bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.users[userID]
	if u == nil {
		if !hidden {
			return
		}
		u = t.userLocked(userID)
	}
	if u.hidden != hidden {
		u.hidden = hidden
		t.changedLocked(u)
	}
}

// changedLocked marks the user for the next turn. Lock should be held.
func (t *Tracker) changedLocked(u *user) {
	if u.watchers.len() > 0 || t.pub != nil {
		t.dirty[u.id] = struct{}{}
	}
}

// localLocked is the user's state from this node's devices alone; a user in grace counts
// as they were. Lock should be held.
func (u *user) localLocked() State {
	if len(u.devices) == 0 {
		if !u.leftAt.IsZero() {
			return u.shownOr(Online)
		}
		return Offline
	}
	for _, d := range u.devices {
		if !d.away {
			return Online
		}
	}
	return Away
}

// shownOr is the state a user in grace keeps: what watchers saw, or def if they saw
// nothing but offline.
func (u *user) shownOr(def State) State {
	if u.shown != Offline {
		return u.shown
	}
	return def
}

// stateLocked is the user's state across nodes. Lock should be held.
func (u *user) stateLocked(now time.Time) State {
	s := u.localLocked()
	for _, r := range u.remote {
		if r.state > s && now.Before(r.expires) {
			s = r.state
		}
	}
	return s
}

// Entry returns userID's presence as a watcher would see it now (hidden users offline).
func (t *Tracker) Entry(userID string) Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entryLocked(userID, t.users[userID], t.now())
}

func (t *Tracker) entryLocked(id string, u *user, now time.Time) Entry {
	if u == nil {
		return Entry{UserID: id}
	}
	if u.hidden {
		return Entry{UserID: id}
	}
	s := u.stateLocked(now)
	e := Entry{UserID: id, State: s}
	if s != Online {
		e.LastActive = u.last
	}
	return e
}

// minute rounds now down to a minute, in Unix seconds.
func minute(now time.Time) int64 { return now.Unix() / 60 * 60 }

// Turn does one turn of the tracker at now: grace ends, remote news expires, and the
// changes due are handed to watchers, one batch per watcher. run calls it every Tick.
func (t *Tracker) Turn(now time.Time) {
	t.mu.Lock()
	t.turnLocked(now)
	out := t.outbox
	t.outbox = nil
	t.mu.Unlock()
	t.flush(out)
}

func (t *Tracker) turnLocked(now time.Time) {
	for id := range t.leaving {
		u := t.users[id]
		if u == nil || now.Sub(u.leftAt) >= t.cfg.Grace {
			delete(t.leaving, id)
			if u != nil {
				u.leftAt = time.Time{}
				u.last = max(u.last, minute(now.Add(-t.cfg.Grace)))
				t.dirty[id] = struct{}{}
			}
		}
	}
	if t.remotes > 0 {
		t.expireLocked(now)
	}
	t.deliverLocked(now)
}

// expireLocked drops the news of other nodes whose time is up. Lock should be held.
func (t *Tracker) expireLocked(now time.Time) {
	for id, u := range t.users {
		for n, r := range u.remote {
			if !now.Before(r.expires) {
				delete(u.remote, n)
				t.remotes--
				t.dirty[id] = struct{}{}
			}
		}
	}
}

// deliverLocked hands the due changes to watchers: a user's change waits until Coalesce
// has passed since the last one handed out. Lock should be held.
func (t *Tracker) deliverLocked(now time.Time) {
	batches := make(map[*Watcher][]Entry)
	for id := range t.dirty {
		u := t.users[id]
		if u == nil {
			delete(t.dirty, id)
			continue
		}
		s := u.stateLocked(now)
		if u.hidden {
			s = Offline
		}
		if s == u.shown {
			delete(t.dirty, id)
			t.publishChangeLocked(id, u)
			t.forgetLocked(id, u)
			continue
		}
		if !u.shownAt.IsZero() && now.Sub(u.shownAt) < t.cfg.Coalesce {
			t.obs.PresenceCoalesced()
			continue // stays dirty: handed out once Coalesce has passed
		}
		delete(t.dirty, id)
		if u.shown != Offline && s != Online {
			u.last = max(u.last, minute(now))
		}
		u.shown, u.shownAt = s, now
		t.publishChangeLocked(id, u)
		e := t.entryLocked(id, u, now)
		u.watchers.each(func(n uint32) {
			w := t.watcherNums.get(n)
			batches[w] = append(batches[w], e)
		})
		t.forgetLocked(id, u)
	}
	for w, b := range batches {
		w.handLocked(b)
		t.obs.PresenceFrame(len(b))
	}
}

// forgetLocked drops a user the tracker has nothing more to say of. Lock should be held.
func (t *Tracker) forgetLocked(id string, u *user) {
	if len(u.devices) == 0 && u.leftAt.IsZero() && len(u.remote) == 0 && u.watchers.len() == 0 &&
		!u.hidden && u.shown == Offline && u.last == 0 {
		delete(t.users, id)
	}
}

// Users returns how many users have a device connected here.
func (t *Tracker) Users() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.local
}

// CountOnline returns how many of users are online or away, on any node, as a watcher
// would see them: a user who hides their presence is not counted, so that a small group's
// count cannot tell them apart. It takes the lock once for the whole list.
func (t *Tracker) CountOnline(users []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, n := t.now(), 0
	for _, id := range users {
		if u := t.users[id]; u != nil && !u.hidden && u.stateLocked(now) != Offline {
			n++
		}
	}
	return n
}
