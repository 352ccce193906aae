package gateway

import (
	"context"
	"errors"
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

// TestLimiterDebt: charge weighs work already done, even past the burst and into debt;
// owing refuses until the bucket has refilled past zero.
func TestLimiterDebt(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(100, 1000) // 100/s, burst 1,000
	if owing, _ := l.owing("a", now); owing {
		t.Fatal("a fresh bucket owes")
	}
	l.charge("a", 2500, now) // more than the burst at once: 1,500 in debt
	owing, wait := l.owing("a", now)
	if !owing || wait != 15*time.Second {
		t.Fatalf("after overdrawing 1,500 at 100/s: owing=%v wait=%v, want 15s", owing, wait)
	}
	if owing, _ := l.owing("b", now); owing {
		t.Fatal("another key shares the debt")
	}
	if owing, _ := l.owing("a", now.Add(15*time.Second)); owing {
		t.Fatal("still owing once refilled to zero")
	}
	l.charge("c", 1_000_000, now)    // 9,990 s of debt
	l.allow("d", now.Add(time.Hour)) // sweeps a and b, which are full
	if owing, _ := l.owing("c", now.Add(time.Hour)); !owing || l.size() != 2 {
		t.Fatalf("a bucket in debt was evicted before it refilled (%d buckets, want c and d)", l.size())
	}
}

// TestLimiterRefund: a token taken for a call that changed nothing is given back.
func TestLimiterRefund(t *testing.T) {
	now := time.Now()
	l := newLimiter(0.001, 2)
	for range 5 {
		ok, _, refund := l.take("a", now)
		if !ok {
			t.Fatal("refunded tokens were not given back")
		}
		refund()
	}
	l.take("a", now)
	l.take("a", now)
	if ok, wait, refund := l.take("a", now); ok || wait <= 0 || refund != nil {
		t.Fatalf("past the burst: ok=%v wait=%v", ok, wait)
	}
}

// TestTurns: calls of one key run one at a time, other keys do not wait, a waiter gives up
// with its context, and keys are forgotten once no call holds or waits for them.
func TestTurns(t *testing.T) {
	tu := newTurns()
	ctx := context.Background()
	leave, err := tu.enter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	leaveB, err := tu.enter(ctx, "b")
	if err != nil {
		t.Fatal("another key waited")
	}
	leaveB()
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tu.enter(short, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second call of a ran beside the first (err %v)", err)
	}
	entered := make(chan func())
	go func() {
		l, _ := tu.enter(ctx, "a")
		entered <- l
	}()
	leave()
	select {
	case l := <-entered:
		l()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call never got its turn")
	}
	tu.mu.Lock()
	defer tu.mu.Unlock()
	if len(tu.keys) != 0 {
		t.Fatalf("%d keys kept after every call left", len(tu.keys))
	}
	var off *turns
	if _, err := off.enter(short, "a"); err != nil {
		t.Fatal("a nil turns made a call wait")
	}
}
