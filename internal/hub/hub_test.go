package hub

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/protocol"
)

func evs(cursors ...int64) []Event {
	out := make([]Event, len(cursors))
	for i, c := range cursors {
		out[i] = Event{Cursor: c, Body: &Body{Type: protocol.EventMessage}}
	}
	return out
}

func TestPublishReachesOnlyThatUsersSubscribers(t *testing.T) {
	h := New()
	a1, a2, b := h.Subscribe("alice", 4), h.Subscribe("alice", 4), h.Subscribe("bob", 4)
	h.Publish("alice", evs(1, 2))
	for _, s := range []*Subscription{a1, a2} {
		for _, want := range []int64{1, 2} {
			if got := (<-s.Events()).Cursor; got != want {
				t.Fatalf("cursor %d, want %d", got, want)
			}
		}
	}
	select {
	case ev := <-b.Events():
		t.Fatalf("bob got alice's event %+v", ev)
	default:
	}
	if n := h.Subscribers(); n != 3 {
		t.Fatalf("Subscribers = %d", n)
	}
}

func TestOverflowEndsOnlyTheSlowSubscriber(t *testing.T) {
	h := New()
	slow, fast := h.Subscribe("alice", 2), h.Subscribe("alice", 8)
	h.Publish("alice", evs(1, 2, 3)) // never blocks, although slow has room for 2
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber not ended")
	}
	if !errors.Is(slow.Err(), ErrOverflow) || fast.Err() != nil {
		t.Fatalf("errs: slow %v, fast %v", slow.Err(), fast.Err())
	}
	if len(slow.Events()) != 2 {
		t.Fatalf("buffered events of the ended subscription: %d, want 2 kept", len(slow.Events()))
	}
	h.Publish("alice", evs(4))
	if len(fast.Events()) != 4 {
		t.Fatalf("fast subscriber has %d events, want 4", len(fast.Events()))
	}
}

func TestKickAndClose(t *testing.T) {
	h := New()
	a, b := h.Subscribe("alice", 1), h.Subscribe("bob", 1)
	h.Kick("alice")
	if !errors.Is(a.Err(), ErrKicked) || b.Err() != nil {
		t.Fatalf("after kick: alice %v, bob %v", a.Err(), b.Err())
	}
	b.Close()
	b.Close() // idempotent
	if !errors.Is(b.Err(), ErrClosed) || h.Subscribers() != 0 {
		t.Fatalf("after close: %v, %d subscribers", b.Err(), h.Subscribers())
	}
	h.Publish("bob", evs(1)) // no subscriber: nothing happens
}

// TestWatch: a Watch subscription queues events for Take, in order, and calls notify after
// each publish to it and when it ends; its queue is all-or-nothing at the limit.
func TestWatch(t *testing.T) {
	h := New()
	var notified atomic.Int32
	w := h.Watch("alice", 3, func() { notified.Add(1) })
	if w.Events() != nil || w.Done() != nil || w.Take(nil) != nil {
		t.Fatal("a new Watch subscription has a channel or queued events")
	}
	h.Publish("alice", evs(1, 2))
	h.Publish("bob", evs(9))
	if n := notified.Load(); n != 1 {
		t.Fatalf("notified %d times after one publish, want 1", n)
	}
	got := w.Take(nil)
	if len(got) != 2 || got[0].Cursor != 1 || got[1].Cursor != 2 {
		t.Fatalf("Take = %v, want cursors 1 and 2", got)
	}
	if w.Take(nil) != nil {
		t.Fatal("Take after Take returned events again")
	}
	h.Publish("alice", evs(3, 4, 5))
	h.Publish("alice", evs(6)) // the limit is 3: overflow
	if !errors.Is(w.Err(), ErrOverflow) {
		t.Fatalf("Err = %v, want overflow", w.Err())
	}
	if n := notified.Load(); n != 3 {
		t.Fatalf("notified %d times, want 3 (two publishes, the end)", n)
	}
	if got := w.Take(nil); len(got) != 3 || got[2].Cursor != 5 {
		t.Fatalf("events queued before the overflow: %v, want cursors 3 to 5", got)
	}
}

// TestWatchHoldsNoQueueWhileIdle: once taken, a subscription keeps no slice, even one handed
// back as spare; while busy it reuses the spare.
func TestWatchHoldsNoQueueWhileIdle(t *testing.T) {
	h := New()
	w := h.Watch("alice", 16, func() {})
	h.Publish("alice", evs(1))
	first := w.Take(nil)
	h.Publish("alice", evs(2))
	clear(first)
	second := w.Take(first)
	if len(second) != 1 || second[0].Cursor != 2 {
		t.Fatalf("Take = %v", second)
	}
	h.Publish("alice", evs(3))
	if got := w.Take(nil); &got[0] != &first[:1][0] {
		t.Error("the spare handed back was not used to queue the next event")
	}
	if w.Take(second[:0]) != nil || w.queue.items != nil {
		t.Error("an idle subscription kept a queue")
	}
}

// TestBodyEncodedOnce: the subscribers of a fanout, on their own goroutines, share one
// encoding of the body.
func TestBodyEncodedOnce(t *testing.T) {
	body := &Body{Type: protocol.EventMessage, Data: []byte(`{"seq":1}`)}
	var calls atomic.Int32
	encode := func(b *Body) []byte {
		calls.Add(1)
		return append([]byte("encoded:"), b.Data...)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := string(body.Encoded(encode)); got != `encoded:{"seq":1}` {
				t.Errorf("Encoded = %s", got)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("encode called %d times, want 1", n)
	}
}

// BenchmarkPublishFanout publishes one message's events to each member of a group of 500,
// from GOMAXPROCS goroutines at once (several senders), while 50 members are online with a
// drained subscription: the cost, and under -cpu 2 the contention, of the hub's one lock.
// "ended/op" counts subscriptions ended by overflow (a drainer that fell behind), which
// would make the remaining publishes cheaper: it should stay 0.
func BenchmarkPublishFanout(b *testing.B) {
	h := New()
	users := make([]string, 500)
	for i := range users {
		users[i] = fmt.Sprintf("user-%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	subs := make([]*Subscription, 50)
	for i, u := range users[:len(subs)] {
		s := h.Subscribe(u, 4096)
		subs[i] = s
		wg.Go(func() {
			for {
				select {
				case <-s.Events():
				case <-s.Done():
					return
				case <-stop:
					return
				}
			}
		})
	}
	events := []Event{{Cursor: 1, Body: &Body{Type: protocol.EventMessage}}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, u := range users {
				h.Publish(u, events)
			}
		}
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
	ended := 0
	for _, s := range subs {
		if s.Err() != nil {
			ended++
		}
	}
	b.ReportMetric(float64(ended), "ended")
}

// TestConvWatchWakesAndCoalesces: a Notify wakes every watch of the conversation and no other,
// two Notifies before a watch looks wake it once, and a closed watch is woken no more.
func TestConvWatchWakesAndCoalesces(t *testing.T) {
	h := New()
	a, b := h.WatchConversations([]string{"c1", "c2"}), h.WatchConversations([]string{"c2"})
	defer b.Close()
	woken := func(w *ConvWatch) bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	h.NotifyConversation("c1")
	h.NotifyConversation("c1")
	if !woken(a) || woken(a) || woken(b) {
		t.Fatal("c1 must wake a once (coalesced), b not at all")
	}
	h.NotifyConversation("c2")
	if !woken(a) || !woken(b) {
		t.Fatal("c2 must wake both")
	}
	a.Close()
	a.Close()
	h.NotifyConversation("c1")
	h.NotifyConversation("c2")
	if woken(a) || !woken(b) {
		t.Fatal("a closed watch is not woken; b still is")
	}
	h.NotifyConversation("nobody watches this")
}

// TestReplaceEndsOlderConnectionsOfTheDevice: Replace ends, with ErrReplaced, the device's
// subscriptions opened before the given time only: not a newer one of the device, not
// another device's, not a long-poll's.
func TestReplaceEndsOlderConnectionsOfTheDevice(t *testing.T) {
	h := New()
	nop := func() {}
	older := h.WatchDevice("bob", "phone", 100, 1, 8, nop)
	newer := h.WatchDevice("bob", "phone", 300, 1, 8, nop)
	tablet := h.WatchDevice("bob", "tablet", 100, 1, 8, nop)
	poll := h.Subscribe("bob", 4)
	h.Replace("bob", "phone", 200)
	if err := older.Err(); err != ErrReplaced {
		t.Fatalf("older phone connection: %v, want ErrReplaced", err)
	}
	for name, s := range map[string]*Subscription{"newer phone": newer, "tablet": tablet, "long-poll": poll} {
		if err := s.Err(); err != nil {
			t.Fatalf("%s ended: %v", name, err)
		}
		s.Close()
	}
}

// TestKickBelowEndsOnlyOlderTokens: KickBelow ends, with ErrKicked, the subscriptions whose
// token generation is below the one given, and those made without one (long-polls), but
// not those of tokens minted at or after it.
func TestKickBelowEndsOnlyOlderTokens(t *testing.T) {
	h := New()
	nop := func() {}
	old := h.WatchDevice("bob", "phone", 100, 1, 8, nop)
	fresh := h.WatchDevice("bob", "tablet", 100, 2, 8, nop)
	poll := h.Subscribe("bob", 4)
	h.KickBelow("bob", 2)
	for name, s := range map[string]*Subscription{"generation 1": old, "long-poll": poll} {
		if err := s.Err(); err != ErrKicked {
			t.Fatalf("%s: %v, want ErrKicked", name, err)
		}
	}
	if err := fresh.Err(); err != nil {
		t.Fatalf("generation 2 ended: %v", err)
	}
	fresh.Close()
}
