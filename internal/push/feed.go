package push

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tasks"
	"github.com/parleychat/parley/protocol"
)

// FeedSubject is the bus subject on which nodes tell each other what the one pushing node
// needs to know: new events in users' logs, changed registrations, and which devices take
// their events live on which node.
const FeedSubject = "parley.push"

// FeedReloadSubject carries, to every node, the ID of a user whose registrations changed
// (the raw bytes of the ID): each node keeps the set of users with registrations, and sends
// news only of them (see Feed).
const FeedReloadSubject = "parley.push.reload"

// registeredEvery is how often a node reads again which users have registrations: it drops
// the users whose last registration went, and finds any whose reload the bus lost.
const registeredEvery = 30 * time.Second

// feedEvery is how often a node publishes what it gathered: one bus message per interval
// per node however busy it is. It delays a push by at most that; the grace period a
// connected device gets is 300 times longer.
const feedEvery = 10 * time.Millisecond

// FeedSettle is the Settle a pusher fed by other nodes uses: five feed intervals, for a
// connection opened on another node just before an event to be known when it is decided.
const FeedSettle = 5 * feedEvery

// Feed links a node's chat service and gateway to the pusher on several nodes: every
// node runs a Pusher, but only the leader's works (store.Leader), so each node forwards
// its commits, registration changes and device presence to the bus, and applies those of
// the other nodes to its own Pusher and Presence. On one node there is no Feed: the chat
// service and the gateway talk to the Pusher and Presence directly.
//
// News of a user without push registrations would reach a pusher that has nothing to do
// with it, so a node sends news only of users in its set of registered users: read from
// the store at start and every registeredEvery, and raised at once by every registration
// change on any node (FeedReloadSubject). Until the first read every user counts. A
// deployment whose users mostly have no registration (web clients, people who refused
// notifications) then pays nothing per message for push; one where all have one pays what
// the feed always cost.
//
// The bus may lose a message: a lost wake-up is found by the pusher's sweep, a lost
// presence change costs a push to a device that had the event, or a grace period's delay.
// A user's first registration reaches the other nodes a bus hop after its commit: an event
// of that moment sent through another node is pushed by the sweep, up to SweepEvery later.
type Feed struct {
	b    bus.Bus
	p    *Pusher
	pres *Presence
	log  *slog.Logger

	mu      sync.Mutex
	pending feedMsg // this interval's reloads, opens and closes (rare)

	// The per-event and per-write news, sharded by user: every commit and every WebSocket
	// write of the node adds to them, and one lock for all made the node's goroutines queue
	// and sleep on it (a quarter of the CPU of a three-node run went to waking them).
	seed   maphash.Seed
	shards [feedShards]feedShard

	loaded atomic.Bool // the registered users were read once: until then every user counts

	// bg owns the reloads a bus message asks for (off the bus's delivery); Run's end
	// closes it, so none reads the store after the node stops.
	bg *tasks.Group
}

const feedShards = 32

// feedShard holds one interval's news of the users that hash to it.
type feedShard struct {
	mu    sync.Mutex
	wakes map[string]int64    // user -> newest cursor
	took  map[deviceKey]int64 // highest cursor per device
	sent  map[deviceKey]int64
	// registered holds the shard's users with push registrations; touched, while the
	// store is read again, the users marked meanwhile, which the new set must keep.
	registered map[string]struct{}
	touched    map[string]struct{}
	_          [24]byte // a shard to a cache line
}

// wantsLocked reports whether the pusher needs news of userID. sh.mu must be held.
func (sh *feedShard) wantsLocked(f *Feed, userID string) bool {
	if !f.loaded.Load() {
		return true
	}
	_, ok := sh.registered[userID]
	return ok
}

func (f *Feed) shard(userID string) *feedShard {
	return &f.shards[maphash.String(f.seed, userID)%feedShards]
}

// feedMsg is one node's news of one interval.
type feedMsg struct {
	Wakes   map[string]int64 `json:"w,omitempty"` // user -> newest cursor
	Reloads []string         `json:"r,omitempty"` // users whose targets changed
	Opens   []feedDevice     `json:"o,omitempty"` // connections opened (Open), in order with Closes per device
	Closes  []feedDevice     `json:"c,omitempty"`
	Took    []feedDevice     `json:"t,omitempty"` // with Cursor
	Sent    []feedDevice     `json:"s,omitempty"` // with Cursor
}

type feedDevice struct {
	User   string `json:"u"`
	Device string `json:"d"`
	Cursor int64  `json:"c,omitempty"`
}

func (m *feedMsg) empty() bool {
	return len(m.Wakes) == 0 && len(m.Reloads) == 0 && len(m.Opens) == 0 && len(m.Closes) == 0 &&
		len(m.Took) == 0 && len(m.Sent) == 0
}

// valid reports whether every user, device and cursor of m has its documented form.
func (m *feedMsg) valid() bool {
	for u, c := range m.Wakes {
		if !protocol.ValidUserID(u) || c < 1 || c > protocol.MaxSafeInteger {
			return false
		}
	}
	for _, u := range m.Reloads {
		if !protocol.ValidUserID(u) {
			return false
		}
	}
	for _, ds := range [][]feedDevice{m.Opens, m.Closes, m.Took, m.Sent} {
		for _, d := range ds {
			if !protocol.ValidUserID(d.User) || !protocol.ValidDeviceID(d.Device) || d.Cursor < 0 || d.Cursor > protocol.MaxSafeInteger {
				return false
			}
		}
	}
	return true
}

// NewFeed subscribes to the feed of the other nodes on b.
func NewFeed(b bus.Bus, p *Pusher, pres *Presence, log *slog.Logger) (*Feed, error) {
	f := &Feed{b: b, p: p, pres: pres, log: log, seed: maphash.MakeSeed(), bg: tasks.New()}
	for i := range f.shards {
		f.shards[i] = feedShard{wakes: make(map[string]int64), took: make(map[deviceKey]int64), sent: make(map[deviceKey]int64),
			registered: make(map[string]struct{})}
	}
	if _, err := b.Subscribe(FeedSubject, f.receive); err != nil {
		return nil, err
	}
	if _, err := b.Subscribe(FeedReloadSubject, func(data []byte) { f.mark(string(data)) }); err != nil {
		return nil, err
	}
	return f, nil
}

// Run publishes what the node gathered every feedEvery, and reads the registered users at
// start and every registeredEvery (on a goroutine of its own: reading many registrations
// must not hold up the news), until ctx ends.
func (f *Feed) Run(ctx context.Context) {
	defer f.bg.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { f.keepRegistered(ctx) })
	t := time.NewTicker(feedEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.publish(context.WithoutCancel(ctx))
			return
		case <-t.C:
			f.publish(ctx)
		}
	}
}

// keepRegistered reads the registered users now and every registeredEvery (every second
// until a first read succeeds), until ctx ends.
func (f *Feed) keepRegistered(ctx context.Context) {
	for {
		next := registeredEvery
		if err := f.loadRegistered(ctx); err != nil && ctx.Err() == nil {
			if f.loaded.Load() {
				f.log.Warn("push: read the registered users (the set read before stays)", "err", err)
			} else {
				f.log.Warn("push: read the registered users (every user's news is sent meanwhile)", "err", err)
				next = time.Second
			}
		}
		if !sleep(ctx, next) {
			return
		}
	}
}

// loadRegistered reads which users have push registrations and makes that the set, keeping
// the users marked while it read.
func (f *Feed) loadRegistered(ctx context.Context) error {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		sh.touched = make(map[string]struct{})
		sh.mu.Unlock()
	}
	fresh := make([]map[string]struct{}, feedShards)
	for i := range fresh {
		fresh[i] = make(map[string]struct{})
	}
	err := eachTargetPage(ctx, f.p.o.Store, func(ts []store.PushTarget) {
		for _, t := range ts {
			fresh[maphash.String(f.seed, t.UserID)%feedShards][t.UserID] = struct{}{}
		}
	})
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		if err == nil {
			for u := range sh.touched {
				fresh[i][u] = struct{}{}
			}
			sh.registered = fresh[i]
		}
		sh.touched = nil
		sh.mu.Unlock()
	}
	if err != nil {
		return err
	}
	f.loaded.Store(true)
	return nil
}

// mark adds userID to the registered users: its registrations changed, here or on another
// node. A user whose last registration went stays until the next read of the store, which
// costs only news nobody needs meanwhile.
func (f *Feed) mark(userID string) {
	if userID == "" {
		return
	}
	sh := f.shard(userID)
	sh.mu.Lock()
	sh.registered[userID] = struct{}{}
	if sh.touched != nil {
		sh.touched[userID] = struct{}{}
	}
	sh.mu.Unlock()
}

func (f *Feed) publish(ctx context.Context) {
	f.mu.Lock()
	m := f.pending
	f.pending = feedMsg{}
	f.mu.Unlock()
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		for u, c := range sh.wakes {
			if m.Wakes == nil {
				m.Wakes = make(map[string]int64)
			}
			m.Wakes[u] = c
		}
		for k, c := range sh.took {
			m.Took = append(m.Took, feedDevice{User: k.user, Device: k.device, Cursor: c})
		}
		for k, c := range sh.sent {
			m.Sent = append(m.Sent, feedDevice{User: k.user, Device: k.device, Cursor: c})
		}
		clear(sh.wakes)
		clear(sh.took)
		clear(sh.sent)
		sh.mu.Unlock()
	}
	if m.empty() {
		return
	}
	data, err := json.Marshal(&m)
	if err == nil {
		err = f.b.Publish(ctx, FeedSubject, data)
	}
	if err != nil {
		f.log.Warn("push: publish the feed (the pusher's sweep finds the events)", "err", err)
	}
}

// receive applies another node's news, on the node that pushes; the others drop it
// unread (a node that takes the lead later may push a device connected elsewhere once).
func (f *Feed) receive(data []byte) {
	if !f.p.Leading() {
		return
	}
	var m feedMsg
	if err := json.Unmarshal(data, &m); err != nil || !m.valid() {
		f.log.Debug("push: a malformed feed message", "err", err)
		return
	}
	// What other nodes tell of their devices is believed for a while only (Presence's
	// ...Elsewhere): it silences pushes, and nothing here can confirm it.
	for _, d := range m.Opens {
		f.pres.OpenElsewhere(d.User, d.Device)
	}
	for _, d := range m.Sent { // before the closes: a close settles what was sent before it
		f.pres.SentElsewhere(d.User, d.Device, d.Cursor)
	}
	for _, d := range m.Closes {
		f.pres.CloseElsewhere(d.User, d.Device)
	}
	for _, d := range m.Took {
		f.pres.TookElsewhere(d.User, d.Device, d.Cursor)
	}
	for u, c := range m.Wakes {
		f.p.Notify(u, c)
	}
	if len(m.Reloads) > 0 {
		f.bg.Go(func(ctx context.Context) { // reading the store must not hold up the bus's delivery
			for _, u := range m.Reloads {
				if err := f.p.Reload(ctx, u); err != nil && ctx.Err() == nil {
					f.log.Warn("push: reload targets", "user", u, "err", err)
				}
			}
		})
	}
}

// Notify is Pusher.Notify here and on the other nodes, for a user with registrations.
func (f *Feed) Notify(userID string, cursor int64) {
	sh := f.shard(userID)
	sh.mu.Lock()
	wants := sh.wantsLocked(f, userID)
	if wants {
		sh.wakes[userID] = max(sh.wakes[userID], cursor)
	}
	sh.mu.Unlock()
	if wants {
		f.p.Notify(userID, cursor)
	}
}

// Reload is Pusher.Reload here and on the other nodes, which also count the user among
// those with registrations from now on.
func (f *Feed) Reload(ctx context.Context, userID string) error {
	f.mark(userID)
	if err := f.b.Publish(ctx, FeedReloadSubject, []byte(userID)); err != nil {
		f.log.Warn("push: publish a registration change (the other nodes read it within a minute)", "user", userID, "err", err)
	}
	f.mu.Lock()
	f.pending.Reloads = append(f.pending.Reloads, userID)
	f.mu.Unlock()
	return f.p.Reload(ctx, userID)
}

// Check is Pusher.Check.
func (f *Feed) Check(provider, token string) error { return f.p.Check(provider, token) }

// Open is Presence.Open here and on the other nodes.
func (f *Feed) Open(userID, deviceID string) {
	f.pres.Open(userID, deviceID)
	f.mu.Lock()
	f.pending.Opens = append(f.pending.Opens, feedDevice{User: userID, Device: deviceID})
	f.mu.Unlock()
}

// Close is Presence.Close here and on the other nodes. A close published in the same
// interval as its open cancels it.
func (f *Feed) Close(userID, deviceID string) {
	f.pres.Close(userID, deviceID)
	f.mu.Lock()
	f.pending.Closes = append(f.pending.Closes, feedDevice{User: userID, Device: deviceID})
	f.mu.Unlock()
}

// Took is Presence.Took here and on the other nodes, for a user with registrations; one
// interval's calls for one device are sent as its highest cursor.
func (f *Feed) Took(userID, deviceID string, cursor int64) {
	if f.raise(userID, deviceID, cursor, func(sh *feedShard) map[deviceKey]int64 { return sh.took }) {
		f.pres.Took(userID, deviceID, cursor)
	}
}

// Sent is Presence.Sent here and on the other nodes, for a user with registrations.
func (f *Feed) Sent(userID, deviceID string, cursor int64) {
	if f.raise(userID, deviceID, cursor, func(sh *feedShard) map[deviceKey]int64 { return sh.sent }) {
		f.pres.Sent(userID, deviceID, cursor)
	}
}

// raise keeps cursor as the device's highest in the map of its user's shard that which
// picks, if the pusher wants news of the user; it reports whether it does.
func (f *Feed) raise(userID, deviceID string, cursor int64, which func(*feedShard) map[deviceKey]int64) bool {
	k, sh := deviceKey{userID, deviceID}, f.shard(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.wantsLocked(f, userID) {
		return false
	}
	m := which(sh)
	m[k] = max(m[k], cursor)
	return true
}
