// Package bustest is the conformance suite that every bus.Bus implementation runs, so the
// in-process and the NATS bus keep one contract.
package bustest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
)

// wait bounds every wait for a delivery.
const wait = 5 * time.Second

// Run runs the suite. open returns a fresh, empty bus for each subtest; the suite closes it.
// Implementations that share a server must isolate each bus (a random subject prefix).
func Run(t *testing.T, open func(t *testing.T) bus.Bus) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b bus.Bus)
	}{
		{"FanoutToSubjectOnly", testFanout},
		{"OrderFromOnePublisher", testOrder},
		{"Unsubscribe", testUnsubscribe},
		{"InvalidSubjects", testInvalidSubjects},
		{"Close", testClose},
		{"Concurrent", testConcurrent},
		{"SlowHandlerNeverBlocksPublish", testSlowHandler},
		{"PublishCanceledContext", testCanceledContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() { _ = b.Close() })
			tt.fn(t, b)
		})
	}
}

// recorder collects what a handler received and reports handler calls that overlapped.
type recorder struct {
	mu      sync.Mutex
	got     []string
	notify  chan struct{}
	running atomic.Int32
	overlap atomic.Bool
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) handle(data []byte) {
	if r.running.Add(1) > 1 {
		r.overlap.Store(true)
	}
	defer r.running.Add(-1)
	r.mu.Lock()
	r.got = append(r.got, string(data))
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// waitFor waits until the recorder holds at least n messages and returns them.
func (r *recorder) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(wait)
	for {
		if got := r.messages(); len(got) >= n {
			if r.overlap.Load() {
				t.Error("handler calls of one subscription overlapped")
			}
			return got
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %d messages; got %d", wait, n, len(r.messages()))
		}
	}
}

// waitUntil waits until the recorder holds msg.
func (r *recorder) waitUntil(t *testing.T, msg string) []string {
	t.Helper()
	deadline := time.After(wait)
	for {
		got := r.messages()
		for _, m := range got {
			if m == msg {
				return got
			}
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %q; got %d messages", wait, msg, len(got))
		}
	}
}

// mustSubscribe subscribes r to subject and unsubscribes at the end of the test.
func mustSubscribe(t *testing.T, b bus.Bus, subject string, r *recorder) bus.Subscription {
	t.Helper()
	sub, err := b.Subscribe(subject, r.handle)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

func mustPublish(t *testing.T, b bus.Bus, subject, msg string) {
	t.Helper()
	if err := b.Publish(context.Background(), subject, []byte(msg)); err != nil {
		t.Fatalf("Publish(%q, %q): %v", subject, msg, err)
	}
}

// settle makes sure subscriptions made so far are in effect on the transport: it publishes on
// a fresh subject until its own subscriber sees a message.
func settle(t *testing.T, b bus.Bus) {
	t.Helper()
	r := newRecorder()
	sub := mustSubscribe(t, b, "bustest.settle", r)
	mustPublish(t, b, "bustest.settle", "x")
	r.waitFor(t, 1)
	_ = sub.Unsubscribe()
}

func testFanout(t *testing.T, b bus.Bus) {
	a1, a2, other := newRecorder(), newRecorder(), newRecorder()
	mustSubscribe(t, b, bus.UserSubject("alice"), a1)
	mustSubscribe(t, b, bus.UserSubject("alice"), a2)
	mustSubscribe(t, b, bus.UserSubject("alice.x"), other)
	settle(t, b)

	mustPublish(t, b, bus.UserSubject("alice"), "hello")
	mustPublish(t, b, bus.UserSubject("alice.x"), "marker")
	for i, r := range []*recorder{a1, a2} {
		if got := r.waitFor(t, 1); len(got) != 1 || got[0] != "hello" {
			t.Errorf("subscriber %d of alice got %q, want [hello]", i, got)
		}
	}
	// One publisher's messages arrive in order, so the marker comes after anything misrouted.
	if got := other.waitFor(t, 1); len(got) != 1 || got[0] != "marker" {
		t.Errorf("subscriber of another subject got %q, want only [marker]", got)
	}
}

func testOrder(t *testing.T, b bus.Bus) {
	const n = 500
	r := newRecorder()
	mustSubscribe(t, b, bus.ConvSubject("c1"), r)
	settle(t, b)
	for i := range n {
		mustPublish(t, b, bus.ConvSubject("c1"), strconv.Itoa(i))
	}
	got := r.waitFor(t, n)
	for i, m := range got {
		if m != strconv.Itoa(i) {
			t.Fatalf("message %d is %q, want %d (order from one publisher)", i, m, i)
		}
	}
}

func testUnsubscribe(t *testing.T, b bus.Bus) {
	gone, stays := newRecorder(), newRecorder()
	sub := mustSubscribe(t, b, "t.unsub", gone)
	mustSubscribe(t, b, "t.unsub", stays)
	settle(t, b)
	mustPublish(t, b, "t.unsub", "before")
	gone.waitFor(t, 1)
	stays.waitFor(t, 1)

	if err := sub.Unsubscribe(); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Errorf("second Unsubscribe: %v, want nil", err)
	}
	mustPublish(t, b, "t.unsub", "after")
	stays.waitUntil(t, "after")
	if got := gone.messages(); len(got) != 1 {
		t.Errorf("unsubscribed handler got %q, want only [before]", got)
	}
}

func testInvalidSubjects(t *testing.T, b bus.Bus) {
	for _, s := range []string{"", ".", "a.", ".a", "a..b", "a b", "a.*", "a.>", "a/b", "é", "parley.user.", strings.Repeat("a", bus.MaxSubjectLen+1)} {
		if err := b.Publish(context.Background(), s, []byte("x")); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Publish(%q) = %v, want ErrInvalidSubject", s, err)
		}
		if _, err := b.Subscribe(s, func([]byte) {}); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Subscribe(%q) = %v, want ErrInvalidSubject", s, err)
		}
	}
}

func testClose(t *testing.T, b bus.Bus) {
	r := newRecorder()
	sub := mustSubscribe(t, b, "t.close", r)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if err := b.Publish(context.Background(), "t.close", []byte("x")); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe("t.close", r.handle); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Errorf("Unsubscribe after Close = %v, want nil", err)
	}
}

// testConcurrent runs publishers, stable subscribers and churning subscribers at once (the
// race detector checks the rest), then checks each stable subscriber saw every message of its
// subject, each publisher's in order.
func testConcurrent(t *testing.T, b bus.Bus) {
	const publishers, perPublisher, subjects, churners = 8, 50, 4, 4
	subject := func(i int) string { return fmt.Sprintf("t.conc.s%d", i%subjects) }
	recs := make([]*recorder, subjects)
	for i := range recs {
		recs[i] = newRecorder()
		mustSubscribe(t, b, subject(i), recs[i])
	}
	settle(t, b)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := range churners {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sub, err := b.Subscribe(subject(c), func([]byte) {})
				if err != nil {
					t.Errorf("Subscribe: %v", err)
					return
				}
				if err := sub.Unsubscribe(); err != nil {
					t.Errorf("Unsubscribe: %v", err)
					return
				}
			}
		})
	}
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Go(func() {
			for i := range perPublisher {
				for s := range subjects {
					if err := b.Publish(context.Background(), subject(s), fmt.Appendf(nil, "%d:%d", p, i)); err != nil {
						t.Errorf("Publish: %v", err)
						return
					}
				}
			}
		})
	}
	pubs.Wait()
	close(stop)
	wg.Wait()

	for s, r := range recs {
		got := r.waitFor(t, publishers*perPublisher)
		next := make([]int, publishers)
		for _, m := range got {
			var p, i int
			if _, err := fmt.Sscanf(m, "%d:%d", &p, &i); err != nil || p < 0 || p >= publishers {
				t.Fatalf("subject %d: unexpected message %q", s, m)
			}
			if i != next[p] {
				t.Fatalf("subject %d: publisher %d's message %d arrived when %d was expected", s, p, i, next[p])
			}
			next[p]++
		}
		if len(got) != publishers*perPublisher {
			t.Errorf("subject %d: got %d messages, want %d", s, len(got), publishers*perPublisher)
		}
	}
}

// testSlowHandler blocks one handler and publishes far more than any queue holds: Publish must
// finish within the deadline, and once the handler is released the subscription recovers.
func testSlowHandler(t *testing.T, b bus.Bus) {
	const n = 20000
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)

	r := newRecorder()
	blocked := make(chan struct{}, 1)
	sub, err := b.Subscribe("t.slow", func(data []byte) {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-release
		r.handle(data)
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	settle(t, b)
	mustPublish(t, b, "t.slow", "first")
	select {
	case <-blocked:
	case <-time.After(wait):
		t.Fatal("the handler was never called")
	}

	done := make(chan error, 1)
	go func() {
		payload := make([]byte, 64)
		for range n {
			if err := b.Publish(context.Background(), "t.slow", payload); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	case <-time.After(wait):
		t.Fatalf("%d publishes did not finish within %v while a handler was blocked", n, wait)
	}

	unblock()
	// Delivery resumes: a message published now arrives, whatever was dropped before it.
	// The transport may still be discarding the backlog, so publish until one arrives.
	deadline := time.After(wait)
	for {
		mustPublish(t, b, "t.slow", "last")
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatal("no delivery after the handler was released")
		case <-time.After(100 * time.Millisecond):
		}
		for _, m := range r.messages() {
			if m == "last" {
				return
			}
		}
	}
}

func testCanceledContext(t *testing.T, b bus.Bus) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Publish(ctx, "t.ctx", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a canceled context = %v, want context.Canceled", err)
	}
}
