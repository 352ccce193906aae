package push

import (
	"sync"
	"time"
)

// breakerAfter is how many transient failures in a row, across devices, mark an origin
// as down.
const breakerAfter = 5

// breakerMax bounds the wait between two probes of an origin that is down.
const breakerMax = 30 * time.Second

// breaker keeps the pusher from hammering a push service that is down. There is one per
// origin (scheme, host and port: APNs's and FCM's configured endpoints, and each Web Push
// service a subscription names), so that users who register endpoints that fail stop only
// their own pushes. Once breakerAfter sends in a row failed for now (5xx, 429, no answer
// within the deadline), the origin is open: its devices stop sending and park, and one probe
// (a parked user's pending push) is let through after 1 s, then 2, 4… up to breakerMax. The
// first answer that is not a transient failure closes it and wakes every parked user. While
// an origin is down the pusher sends it one request per probe interval, whatever the number
// of devices waiting: no busy loop, and no device's own backoff grows because of an outage
// that was not its token's fault.
type breaker struct {
	mu      sync.Mutex
	fails   int       // transient failures in a row
	last    time.Time // of the last failure
	open    bool
	until   time.Time // when the next probe may go
	wait    time.Duration
	probing bool
	parked  map[string]bool // users with pushes waiting for the origin
	timer   *time.Timer
}

// admit reports whether uid may send now; if not, uid is parked until the origin is back.
func (b *breaker) admit(uid string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if !b.probing && !now.Before(b.until) {
		b.probing = true
		return true
	}
	b.parkLocked(uid)
	return false
}

func (b *breaker) parkLocked(uid string) {
	if b.parked == nil {
		b.parked = make(map[string]bool)
	}
	b.parked[uid] = true
}

// failed records a transient failure of uid's send. It reports whether the origin is
// now open (uid is then parked), and calls probe with a parked user when the next probe
// is due.
func (b *breaker) failed(uid string, now time.Time, probe func(uid string)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails++
	b.last = now
	switch {
	case b.probing:
		b.probing = false
		b.wait = min(2*b.wait, breakerMax)
	case !b.open && b.fails >= breakerAfter:
		b.open, b.wait = true, time.Second
	case !b.open:
		return false
	}
	b.until = now.Add(b.wait)
	b.parkLocked(uid)
	b.scheduleLocked(probe)
	return true
}

// scheduleLocked arranges for one parked user to be handed to probe when the next probe is
// due.
func (b *breaker) scheduleLocked(probe func(uid string)) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timer = time.AfterFunc(b.wait, func() {
		b.mu.Lock()
		var uid string
		for u := range b.parked {
			uid = u
			break
		}
		b.mu.Unlock()
		if uid != "" {
			probe(uid)
		}
	})
}

// answered records an answer that shows the origin is up (anything but a transient
// failure) and returns the users to wake if it was open.
func (b *breaker) answered() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	if !b.open {
		return nil
	}
	b.open, b.probing = false, false
	if b.timer != nil {
		b.timer.Stop()
	}
	woken := make([]string, 0, len(b.parked))
	for u := range b.parked {
		woken = append(woken, u)
	}
	clear(b.parked)
	return woken
}

// idle reports whether the breaker holds nothing worth keeping: closed, nobody parked, and
// no failure in the last d.
func (b *breaker) idle(now time.Time, d time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open && len(b.parked) == 0 && (b.fails == 0 || now.Sub(b.last) > d)
}

// stop cancels a pending probe (the pusher is stopping).
func (b *breaker) stop() {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
}
