package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter keeps one token bucket per key (a user's device). A nil *limiter allows all.
// Buckets idle for longer than it takes one to refill completely are evicted: a fresh
// bucket is full too, so eviction changes no decision.
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
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= l.idle {
		l.sweepLocked(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Hour // cannot happen: burst is at least 1
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweepLocked evicts idle buckets. l.mu must be held.
func (l *limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= l.idle {
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
