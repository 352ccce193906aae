package gateway

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(2, 3) // 2/s, burst 3
	for i := range 3 {
		if ok, _ := l.allow("a", now); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.allow("a", now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("over the burst: ok=%v wait=%v", ok, wait)
	}
	if ok, _ := l.allow("b", now); !ok {
		t.Fatal("another device shares the bucket")
	}
	if ok, _ := l.allow("a", now.Add(600*time.Millisecond)); !ok {
		t.Fatal("a refill did not allow a request")
	}
	// A refused request takes no token: after 500 ms exactly one more is allowed.
	if ok, _ := l.allow("a", now.Add(1100*time.Millisecond)); !ok {
		t.Fatal("refusals consumed tokens")
	}
}

func TestLimiterEviction(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(100, 200)
	for _, k := range []string{"a", "b", "c"} {
		l.allow(k, now)
	}
	l.allow("b", now.Add(30*time.Second))
	l.allow("d", now.Add(l.idle)) // sweeps: a and c idle long enough, b not
	if got := l.size(); got != 2 {
		t.Fatalf("%d buckets after eviction, want 2 (b, d)", got)
	}
}

func TestLimiterOff(t *testing.T) {
	var l *limiter = newLimiter(0, 0)
	if l != nil {
		t.Fatal("rate 0 did not turn the limiter off")
	}
	if ok, _ := l.allow("a", time.Now()); !ok {
		t.Fatal("a nil limiter refused")
	}
}

func TestRetrySeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {48 * time.Hour, 86400}} {
		if got := retrySeconds(tt.d); got != tt.want {
			t.Errorf("retrySeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
