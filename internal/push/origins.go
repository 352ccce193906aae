package push

import (
	"sync"
	"time"
)

// Origins is implemented by a provider whose requests go wherever each target says (Web
// Push: the origin of the subscription's endpoint, which the client chose), rather than to
// the one service the operator configured. Each origin then has a breaker of its own and
// may hold at most Options.OriginShare requests at once. A provider that does not implement
// it (APNs, FCM) is one origin, its configured endpoint, with its breaker and no share.
type Origins interface {
	// Origin returns scheme://host:port of t's requests, lower case with the port always
	// written, or "" when t names none (Send then fails it without a request).
	Origin(t Target) string
}

// origin is the pusher's state of one push service.
type origin struct {
	br       breaker
	limited  bool            // client-chosen: at most originTable.share requests at once
	inflight int             // requests under way (originTable.mu)
	waiting  map[string]bool // users refused a request slot, woken as slots free (originTable.mu)
}

// originTable holds every origin with a request under way or state worth keeping (a breaker
// that counted failures): an idle origin is dropped at the next prune, so that an attacker's
// many endpoints leave nothing behind once their registrations are gone.
type originTable struct {
	share int        // the most requests one limited origin may have under way
	mu    sync.Mutex // guards m and each origin's inflight and waiting
	m     map[string]*origin
}

func newOriginTable(share int) *originTable {
	return &originTable{share: share, m: make(map[string]*origin)}
}

// acquire reserves a request slot at key for uid and returns the origin, pinned until
// release. It returns nil when the origin is limited and at its share: uid is then woken
// (passed to release's caller) when a slot frees.
func (ot *originTable) acquire(key string, limited bool, uid string) *origin {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	o := ot.m[key]
	if o == nil {
		o = &origin{limited: limited}
		ot.m[key] = o
	}
	if o.limited && o.inflight >= ot.share {
		if o.waiting == nil {
			o.waiting = make(map[string]bool)
		}
		o.waiting[uid] = true
		return nil
	}
	o.inflight++
	return o
}

// release frees the slot acquire reserved and returns a user that waited for one ("" when
// none did), for the caller to wake.
func (ot *originTable) release(key string) string {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	o := ot.m[key]
	if o == nil {
		return ""
	}
	o.inflight--
	for uid := range o.waiting {
		delete(o.waiting, uid)
		return uid
	}
	return ""
}

// prune drops the origins that hold nothing: no request under way, nobody waiting, and a
// breaker that is closed with no failure since idleAfter before now.
func (ot *originTable) prune(now time.Time, idleAfter time.Duration) {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	for k, o := range ot.m {
		if o.inflight == 0 && len(o.waiting) == 0 && o.br.idle(now, idleAfter) {
			delete(ot.m, k)
		}
	}
}

// len returns how many origins are kept.
func (ot *originTable) len() int {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	return len(ot.m)
}

// stop cancels every breaker's pending probe (the pusher is stopping).
func (ot *originTable) stop() {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	for _, o := range ot.m {
		o.br.stop()
	}
}
