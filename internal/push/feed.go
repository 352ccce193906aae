package push

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/bus"
)

// FeedSubject is the bus subject on which nodes tell each other what the one pushing node
// needs to know: new events in users' logs, changed registrations, and which devices take
// their events live on which node.
const FeedSubject = "parley.push"

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
// The bus may lose a message: a lost wake-up is found by the pusher's sweep, a lost
// presence change costs a push to a device that had the event, or a grace period's delay.
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
}

const feedShards = 32

// feedShard holds one interval's news of the users that hash to it.
type feedShard struct {
	mu    sync.Mutex
	wakes map[string]int64    // user -> newest cursor
	took  map[deviceKey]int64 // highest cursor per device
	sent  map[deviceKey]int64
	_     [40]byte // a shard to a cache line
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

// NewFeed subscribes to the feed of the other nodes on b.
func NewFeed(b bus.Bus, p *Pusher, pres *Presence, log *slog.Logger) (*Feed, error) {
	f := &Feed{b: b, p: p, pres: pres, log: log, seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i] = feedShard{wakes: make(map[string]int64), took: make(map[deviceKey]int64), sent: make(map[deviceKey]int64)}
	}
	if _, err := b.Subscribe(FeedSubject, f.receive); err != nil {
		return nil, err
	}
	return f, nil
}

// Run publishes what the node gathered every feedEvery until ctx ends.
func (f *Feed) Run(ctx context.Context) {
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
	if err := json.Unmarshal(data, &m); err != nil {
		f.log.Warn("push: a malformed feed message", "err", err)
		return
	}
	for _, d := range m.Opens {
		f.pres.Open(d.User, d.Device)
	}
	for _, d := range m.Sent { // before the closes: a close settles what was sent before it
		f.pres.Sent(d.User, d.Device, d.Cursor)
	}
	for _, d := range m.Closes {
		f.pres.Close(d.User, d.Device)
	}
	for _, d := range m.Took {
		f.pres.Took(d.User, d.Device, d.Cursor)
	}
	for u, c := range m.Wakes {
		f.p.Notify(u, c)
	}
	if len(m.Reloads) > 0 {
		go func() { // reading the store must not hold up the bus's delivery
			for _, u := range m.Reloads {
				if err := f.p.Reload(context.Background(), u); err != nil {
					f.log.Warn("push: reload targets", "user", u, "err", err)
				}
			}
		}()
	}
}

// Notify is Pusher.Notify here and on the other nodes.
func (f *Feed) Notify(userID string, cursor int64) {
	f.p.Notify(userID, cursor)
	sh := f.shard(userID)
	sh.mu.Lock()
	sh.wakes[userID] = max(sh.wakes[userID], cursor)
	sh.mu.Unlock()
}

// Reload is Pusher.Reload here and on the other nodes.
func (f *Feed) Reload(ctx context.Context, userID string) error {
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

// Took is Presence.Took here and on the other nodes; one interval's calls for one device
// are sent as its highest cursor.
func (f *Feed) Took(userID, deviceID string, cursor int64) {
	f.pres.Took(userID, deviceID, cursor)
	f.raise(userID, deviceID, cursor, func(sh *feedShard) map[deviceKey]int64 { return sh.took })
}

// Sent is Presence.Sent here and on the other nodes.
func (f *Feed) Sent(userID, deviceID string, cursor int64) {
	f.pres.Sent(userID, deviceID, cursor)
	f.raise(userID, deviceID, cursor, func(sh *feedShard) map[deviceKey]int64 { return sh.sent })
}

// raise keeps cursor as the device's highest in the map of its user's shard that which picks.
func (f *Feed) raise(userID, deviceID string, cursor int64, which func(*feedShard) map[deviceKey]int64) {
	k, sh := deviceKey{userID, deviceID}, f.shard(userID)
	sh.mu.Lock()
	m := which(sh)
	m[k] = max(m[k], cursor)
	sh.mu.Unlock()
}
