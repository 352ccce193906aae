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
//
// What other nodes tell of their devices (through the Feed, on the bus) is held apart from
// what this node's gateway tells, and believed for remoteTTL after its latest news only: a
// message on the bus that claims a device is connected, or has taken events up to some
// cursor, would otherwise silence the user's pushes for good, whoever sent it. A device
// connected elsewhere that takes events keeps its news fresh (Sent, Took); one idle for
// longer counts as offline until it takes its next event, which its node tells within a
// feed interval, before the pusher decides (FeedSettle).
type Presence struct {
	seed   maphash.Seed
	shards [presenceShards]presenceShard
	now    func() time.Time
}

const presenceShards = 32

type presenceShard struct {
	mu        sync.Mutex
	devices   map[deviceKey]*seen // what this node's gateway told
	elsewhere map[deviceKey]*seen // what other nodes told (the ...Elsewhere methods)
	_         [32]byte            // a shard to a cache line
}

// remoteTTL is how long what another node told of a device is believed after its latest
// news of it.
const remoteTTL = time.Minute

type deviceKey struct{ user, device string }

// seen is what presence knows of one device.
type seen struct {
	open    int        // open WebSockets and waiting long-polls
	last    time.Time  // when the last of them ended, or a sync answered
	taken   int64      // the highest cursor the device has, as far as the server can tell
	pending []sentMark // written to a WebSocket, not yet counted as taken (Sent)
	news    time.Time  // the latest news of it, for remoteTTL (elsewhere only)
}

// sentMark is a cursor written to a device's WebSocket, and when.
type sentMark struct {
	cursor int64
	at     time.Time
}

// sentSettle is how long a WebSocket must stay open after a write for the events written
// to count as taken. A write that reached the kernel has not reached the device: a tab
// closed at that moment loses it, and the device would then never be notified.
const sentSettle = time.Second

// maxPending bounds a device's unsettled writes; past it the oldest is settled early.
const maxPending = 16

// settle counts as taken the writes that stayed sentSettle on an open connection.
func (s *seen) settle(now time.Time) {
	i := 0
	for ; i < len(s.pending) && now.Sub(s.pending[i].at) >= sentSettle; i++ {
		s.taken = max(s.taken, s.pending[i].cursor)
	}
	s.pending = s.pending[i:]
}

// NewPresence returns an empty Presence on the given clock (nil: time.Now).
func NewPresence(now func() time.Time) *Presence {
	if now == nil {
		now = time.Now
	}
	p := &Presence{seed: maphash.MakeSeed(), now: now}
	for i := range p.shards {
		p.shards[i].devices = make(map[deviceKey]*seen)
		p.shards[i].elsewhere = make(map[deviceKey]*seen)
	}
	return p
}

func (p *Presence) shard(userID string) *presenceShard {
	return &p.shards[maphash.String(p.seed, userID)%presenceShards]
}

// Open records a connection of the device that takes events as they come (a WebSocket, a
// waiting long-poll); Close ends it.
func (p *Presence) Open(userID, deviceID string) { p.open(userID, deviceID, false) }

// OpenElsewhere is Open for a connection on another node.
func (p *Presence) OpenElsewhere(userID, deviceID string) { p.open(userID, deviceID, true) }

func (p *Presence) open(userID, deviceID string, remote bool) {
	sh := p.shard(userID)
	sh.mu.Lock()
	sh.get(userID, deviceID, remote, p.now()).open++
	sh.mu.Unlock()
}

// Close ends a connection Open recorded.
func (p *Presence) Close(userID, deviceID string) { p.close(userID, deviceID, false) }

// CloseElsewhere ends a connection OpenElsewhere recorded.
func (p *Presence) CloseElsewhere(userID, deviceID string) { p.close(userID, deviceID, true) }

func (p *Presence) close(userID, deviceID string, remote bool) {
	sh := p.shard(userID)
	sh.mu.Lock()
	s := sh.get(userID, deviceID, remote, p.now())
	s.open = max(s.open-1, 0)
	s.last = p.now()
	s.settle(s.last)
	s.pending = nil // written too shortly before the close to count: they may be lost
	sh.mu.Unlock()
}

// Sent records that events up to cursor were written to one of the device's WebSockets.
// They count as taken once the connection has stayed open sentSettle after the write.
func (p *Presence) Sent(userID, deviceID string, cursor int64) {
	p.sent(userID, deviceID, cursor, false)
}

// SentElsewhere is Sent for a WebSocket on another node.
func (p *Presence) SentElsewhere(userID, deviceID string, cursor int64) {
	p.sent(userID, deviceID, cursor, true)
}

func (p *Presence) sent(userID, deviceID string, cursor int64, remote bool) {
	sh := p.shard(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := p.now()
	s := sh.get(userID, deviceID, remote, now)
	s.last = now
	s.settle(now)
	if n := len(s.pending); n > 0 && now.Sub(s.pending[n-1].at) < sentSettle/10 {
		s.pending[n-1].cursor = max(s.pending[n-1].cursor, cursor) // one mark per 100 ms
		return
	}
	if len(s.pending) == maxPending {
		s.taken = max(s.taken, s.pending[0].cursor)
		s.pending = s.pending[1:]
	}
	s.pending = append(s.pending, sentMark{cursor, now})
}

// Took records that the device has its user's events up to cursor: a sync or long-poll
// answered them, or the device named cursor as where it is.
func (p *Presence) Took(userID, deviceID string, cursor int64) {
	p.took(userID, deviceID, cursor, false)
}

// TookElsewhere is Took for a sync answered on another node.
func (p *Presence) TookElsewhere(userID, deviceID string, cursor int64) {
	p.took(userID, deviceID, cursor, true)
}

func (p *Presence) took(userID, deviceID string, cursor int64, remote bool) {
	sh := p.shard(userID)
	sh.mu.Lock()
	now := p.now()
	s := sh.get(userID, deviceID, remote, now)
	s.taken = max(s.taken, cursor)
	s.last = now
	sh.mu.Unlock()
}

// state reports whether the device is live (open, or seen within grace) and the highest
// cursor it took.
func (p *Presence) state(userID, deviceID string, grace time.Duration) (live bool, taken int64) {
	sh := p.shard(userID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k, now := deviceKey{userID, deviceID}, p.now()
	if s := sh.elsewhere[k]; s != nil {
		if now.Sub(s.news) >= remoteTTL {
			delete(sh.elsewhere, k) // not believed any more
		} else {
			s.settle(now)
			live, taken = s.open > 0 || now.Sub(s.last) < grace, s.taken
		}
	}
	if s := sh.devices[k]; s != nil {
		s.settle(now)
		live, taken = live || s.open > 0 || now.Sub(s.last) < grace, max(taken, s.taken)
	}
	return live, taken
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
		for k, s := range sh.elsewhere {
			if (s.open == 0 && now.Sub(s.last) >= grace) || now.Sub(s.news) >= remoteTTL {
				delete(sh.elsewhere, k)
			}
		}
		sh.mu.Unlock()
	}
}

// get returns the device's record, of what this node's gateway told or (remote) what other
// nodes told, made if missing, with news of it at now. sh.mu must be held.
func (sh *presenceShard) get(userID, deviceID string, remote bool, now time.Time) *seen {
	m := sh.devices
	if remote {
		m = sh.elsewhere
	}
	k := deviceKey{userID, deviceID}
	s := m[k]
	if s == nil || (remote && now.Sub(s.news) >= remoteTTL) {
		s = &seen{}
		m[k] = s
	}
	s.news = now
	return s
}
