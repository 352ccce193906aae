package gateway

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter keeps one token bucket per key (a user's device). A nil *limiter allows all.
// Buckets idle for longer than it takes one to refill completely are evicted unless in debt
// (see charge): a fresh bucket is full too, so eviction changes no decision.
type limiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration // evict buckets unused for this long

	mu        sync.Mutex // guards buckets and lastSweep
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// newLimiter returns a limiter of perSecond with burst, or nil when perSecond is 0 (off).
func newLimiter(perSecond float64, burst int) *limiter {
	if perSecond <= 0 {
		return nil
	}
	refill := time.Duration(float64(burst) / perSecond * float64(time.Second))
	return &limiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		idle:    max(time.Minute, refill),
		buckets: make(map[string]*bucket),
	}
}

// allow takes one token from key's bucket. When none is left it returns false and how long
// until one is.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	ok, wait, _ := l.take(key, now)
	return ok, wait
}

// take is allow for a token that may be given back: refund returns it (as far as later
// takes allow), for a call that turned out to change nothing. refund is nil when refused.
func (l *limiter) take(key string, now time.Time) (ok bool, wait time.Duration, refund func()) {
	if l == nil {
		return true, 0, func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.bucketLocked(key, now).ReserveN(now, 1)
	if !r.OK() {
		return false, time.Hour, nil // cannot happen: burst is at least 1
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d, nil
	}
	// CancelAt at the reservation's own time: at any later time it restores nothing, as the
	// reservation was acted on at once.
	return true, 0, func() { r.CancelAt(now) }
}

// charge takes n tokens from key's bucket for work already done, even into debt: a bucket
// in debt refuses (see owing) until it has refilled past zero. It weighs a limit after the
// fact, by what a call caused rather than by the call.
func (l *limiter) charge(key string, n int, now time.Time) {
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(key, now)
	for ; n > 0; n -= l.burst { // ReserveN refuses more than the burst at once
		b.ReserveN(now, min(n, l.burst))
	}
}

// owing reports whether key's bucket is in debt, and how long until it is not.
func (l *limiter) owing(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tokens := l.bucketLocked(key, now).TokensAt(now)
	if tokens >= 0 {
		return false, 0
	}
	return true, time.Duration(-tokens / float64(l.limit) * float64(time.Second))
}

// bucketLocked returns key's bucket, made full if it has none, sweeping idle buckets from
// time to time. l.mu must be held.
func (l *limiter) bucketLocked(key string, now time.Time) *rate.Limiter {
	if now.Sub(l.lastSweep) >= l.idle {
		l.sweepLocked(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	return b.lim
}

// sweepLocked evicts idle buckets. l.mu must be held.
func (l *limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= l.idle && b.lim.TokensAt(now) >= 0 { // a debt is never forgiven
			delete(l.buckets, k)
		}
	}
	l.lastSweep = now
}

// size returns the number of buckets held, for tests.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// retrySeconds rounds a wait up to whole seconds, at least 1, as Retry-After wants.
func retrySeconds(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(min(d, 24*time.Hour).Seconds())))
}

// turns lets the calls of each key (a device) run one at a time. A nil *turns lets all run.
type turns struct {
	mu   sync.Mutex // guards keys
	keys map[string]*turn
}

type turn struct {
	token chan struct{} // holds one value while a call runs
	users int           // calls running or waiting; guarded by turns.mu
}

func newTurns() *turns { return &turns{keys: make(map[string]*turn)} }

// enter waits for key's turn, or for ctx to end (its error). leave ends the turn.
func (t *turns) enter(ctx context.Context, key string) (leave func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	t.mu.Lock()
	k := t.keys[key]
	if k == nil {
		k = &turn{token: make(chan struct{}, 1)}
		t.keys[key] = k
	}
	k.users++
	t.mu.Unlock()
	release := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if k.users--; k.users == 0 {
			delete(t.keys, key)
		}
	}
	select {
	case k.token <- struct{}{}:
		return func() { <-k.token; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
