package push

import (
	"hash/maphash"
	"sync"
	"time"
)

// Presence records which devices take their events live, so that the pusher leaves them
// alone: a device with an open WebSocket or a waiting long-poll, or one whose last sync
// ended less than the grace period ago (a long-poller between two polls), is live; the
// highest cursor it has taken tells whether it already has an event. The gateway feeds it.
// It is memory only: after a restart every device counts as offline until it connects,
// which can cost a push, never lose one.
//
// It is sharded by user: every WebSocket write of every connection tells it.
type Presence struct {
	seed   maphash.Seed
	shards [presenceShards]presenceShard
	now    func() time.Time
}

const presenceShards = 32

type presenceShard struct {
	mu      sync.Mutex
	devices map[deviceKey]*seen
	_       [40]byte // a shard to a cache line
}

type deviceKey struct{ user, device string }

// seen is what presence knows of one device.
type seen struct {
	open  int       // open WebSockets and waiting long-polls
	last  time.Time // when the last of them ended, or a sync answered
	taken int64     // the highest cursor handed to the device
}

// NewPresence returns an empty Presence on the given clock (nil: time.Now).
func NewPresence(now func() time.Time) *Presence {
	if now == nil {
		now = time.Now
	}
	p := &Presence{seed: maphash.MakeSeed(), now: now}
	for i := range p.shards {
		p.shards[i].devices = make(map[deviceKey]*seen)
	}
	return p
}

func (p *Presence) shard(userID string) *presenceShard {
	return &p.shards[maphash.String(p.seed, userID)%presenceShards]
}

// Open records a connection of the device that takes events as they come (a WebSocket, a
// waiting long-poll); Close ends it.
func (p *Presence) Open(userID, deviceID string) {
	sh := p.shard(userID)
	sh.mu.Lock()
	sh.get(userID, deviceID).open++
	sh.mu.Unlock()
}

// Close ends a connection Open recorded.
func (p *Presence) Close(userID, deviceID string) {
	sh := p.shard(userID)
	sh.mu.Lock()
	s := sh.get(userID, deviceID)
	s.open = max(s.open-1, 0)
	s.last = p.now()
	sh.mu.Unlock()
}

// Took records that the device was handed its user's events up to cursor (a push on its
// WebSocket, a sync or long-poll answer).
func (p *Presence) Took(userID, deviceID string, cursor int64) {
	sh := p.shard(userID)
	sh.mu.Lock()
	s := sh.get(userID, deviceID)
	s.taken = max(s.taken, cursor)
	s.last = p.now()
	sh.mu.Unlock()
}

// state reports whether the device is live (open, or seen within grace) and the highest
// cursor it took.
func (p *Presence) state(userID, deviceID string, grace time.Duration) (live bool, taken int64) {
	sh := p.shard(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.devices[deviceKey{userID, deviceID}]
	if s == nil {
		return false, 0
	}
	return s.open > 0 || p.now().Sub(s.last) < grace, s.taken
}

// forget drops what is known of a device that is neither open nor recently seen: the map
// holds only devices active within the grace period.
func (p *Presence) forget(grace time.Duration) {
	now := p.now()
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for k, s := range sh.devices {
			if s.open == 0 && now.Sub(s.last) >= grace {
				delete(sh.devices, k)
			}
		}
		sh.mu.Unlock()
	}
}

// get returns the device's record, made if missing. sh.mu must be held.
func (sh *presenceShard) get(userID, deviceID string) *seen {
	k := deviceKey{userID, deviceID}
	s := sh.devices[k]
	if s == nil {
		s = &seen{}
		sh.devices[k] = s
	}
	return s
}
