package hub

import (
	"fmt"
	"testing"
	"time"
)

// watcher is a subscription made by Watch whose notify signals a channel, as the gateway's
// writer would be woken.
type watcher struct {
	*Subscription
	woken chan struct{}
}

func watch(h *Hub, user string, limit int) watcher {
	w := watcher{woken: make(chan struct{}, 1)}
	w.Subscription = h.Watch(user, limit, func() {
		select {
		case w.woken <- struct{}{}:
		default:
		}
	})
	return w
}

// nextNotice waits up to d for a notice of w and returns it.
func (w watcher) nextNotice(t *testing.T, d time.Duration) (Notice, bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if ns := w.TakeNotices(nil); len(ns) > 0 {
			if len(ns) != 1 {
				t.Fatalf("%d notices of one conversation at once: %+v", len(ns), ns)
			}
			return ns[0], true
		}
		select {
		case <-w.woken:
		case <-deadline.C:
			return Notice{}, false
		}
	}
}

func msg(seq int64) *Body {
	return &Body{Type: "message", Data: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}
}

func TestRoomPushesOpenSubscriptionsInSeqOrder(t *testing.T) {
	h := New()
	open, other := watch(h, "bob", 100), watch(h, "carol", 100)
	defer open.Close()
	defer other.Close()
	h.Follow(open.Subscription, "g1", 0, 0)
	h.Follow(other.Subscription, "g1", 0, 0)
	if n := h.OpenConversation(open.Subscription, "g1"); n != 1 {
		t.Fatalf("open count %d", n)
	}
	// Seqs 1..5 reach the hub out of order; the open subscription gets them in order.
	for _, seq := range []int64{1, 3, 2, 5, 4} {
		h.Message("g1", seq, "alice", msg(seq))
	}
	got := open.Take(nil)
	if len(got) != 5 {
		t.Fatalf("%d pushes, want 5", len(got))
	}
	for i, ev := range got {
		if want := fmt.Sprintf(`{"seq":%d}`, i+1); string(ev.Data) != want || ev.Cursor != 0 {
			t.Fatalf("push %d: cursor %d data %s, want %s", i, ev.Cursor, ev.Data, want)
		}
	}
	if evs := other.Take(nil); evs != nil {
		t.Fatalf("a follower without the conversation open got pushes: %d", len(evs))
	}
	if f, o := h.Followers("g1"); f != 2 || o != 1 {
		t.Fatalf("followers %d open %d", f, o)
	}
}

func TestRoomCoalescesNotices(t *testing.T) {
	h := New()
	bob := watch(h, "bob", 100)
	defer bob.Close()
	h.Follow(bob.Subscription, "g1", 2, 2) // bob has read up to 2
	start := time.Now()
	h.Message("g1", 3, "alice", msg(3))
	n, ok := bob.nextNotice(t, 5*time.Second)
	if !ok || n.ConvID != "g1" || n.MaxSeq != 3 || n.Unread != 1 {
		t.Fatalf("first notice %+v (%v), want max_seq 3 unread 1", n, ok)
	}
	for seq := int64(4); seq <= 103; seq++ { // a burst of 100 within the second
		h.Message("g1", seq, "alice", msg(seq))
	}
	n, ok = bob.nextNotice(t, 5*time.Second)
	if !ok || n.MaxSeq != 103 || n.Unread != 101 {
		t.Fatalf("second notice %+v (%v), want max_seq 103 unread 101", n, ok)
	}
	if el := time.Since(start); el < NoticeInterval {
		t.Fatalf("two notices of one conversation %v apart, want at least %v", el, NoticeInterval)
	}
	if n, ok := bob.nextNotice(t, 1500*time.Millisecond); ok {
		t.Fatalf("a third notice with nothing new: %+v", n)
	}
}

func TestRoomSeenAndSender(t *testing.T) {
	h := New()
	alice, bob := watch(h, "alice", 100), watch(h, "bob", 100)
	defer alice.Close()
	defer bob.Close()
	h.Follow(alice.Subscription, "g1", 0, 0)
	h.Follow(bob.Subscription, "g1", 0, 0)
	h.Seen(bob.Subscription, "g1", 1)
	h.Message("g1", 1, "alice", msg(1))
	h.Message("g1", 2, "alice", msg(2))
	// alice's other device learns of her message (to fetch it) with nothing unread; bob has
	// read 1 of 2.
	for _, c := range []struct {
		w      watcher
		unread int64
	}{{alice, 0}, {bob, 1}} {
		n, ok := c.w.nextNotice(t, 5*time.Second)
		if !ok || n.MaxSeq < 1 {
			t.Fatalf("no notice: %+v", n)
		}
		if n.MaxSeq == 1 {
			n, ok = c.w.nextNotice(t, 5*time.Second)
		}
		if !ok || n.MaxSeq != 2 || n.Unread != c.unread {
			t.Fatalf("%s: notice %+v, want max_seq 2 unread %d", c.w.userID, n, c.unread)
		}
	}
}

func TestRoomEndsWithItsFollowers(t *testing.T) {
	h := New()
	bob := watch(h, "bob", 100)
	h.Follow(bob.Subscription, "g1", 0, 0)
	h.Follow(bob.Subscription, "g2", 0, 0)
	h.Unfollow(bob.Subscription, "g2")
	if f, _ := h.Followers("g2"); f != 0 {
		t.Fatalf("g2 has %d followers after unfollow", f)
	}
	bob.Close()
	if f, _ := h.Followers("g1"); f != 0 {
		t.Fatalf("g1 has %d followers after close", f)
	}
	h.Message("g1", 1, "alice", msg(1)) // no room: nothing happens
	if ns := bob.TakeNotices(nil); ns != nil {
		t.Fatalf("closed subscription got %+v", ns)
	}
}

func TestRoomOverflowEndsTheSlowOpenSubscription(t *testing.T) {
	h := New()
	slow := watch(h, "bob", 3)
	defer slow.Close()
	h.Follow(slow.Subscription, "g1", 0, 0)
	h.OpenConversation(slow.Subscription, "g1")
	for seq := int64(1); seq <= 4; seq++ {
		h.Message("g1", seq, "alice", msg(seq))
	}
	if slow.Err() != ErrOverflow {
		t.Fatalf("err %v, want overflow", slow.Err())
	}
}

func TestRoomSkipsAGapThatNeverFills(t *testing.T) {
	h := New()
	bob := watch(h, "bob", 1000)
	defer bob.Close()
	h.Follow(bob.Subscription, "g1", 0, 0)
	h.OpenConversation(bob.Subscription, "g1")
	h.Message("g1", 1, "alice", msg(1))
	for seq := int64(3); seq <= 3+maxPending; seq++ { // 2 never comes
		h.Message("g1", seq, "alice", msg(seq))
	}
	got := bob.Take(nil)
	if len(got) != 2+maxPending {
		t.Fatalf("%d pushes, want %d (1, then 3..%d once the gap was given up)", len(got), 2+maxPending, 3+maxPending)
	}
}

// TestRoomSkipsAGapAfterAWhile: a seq that never comes (a bus message lost between nodes)
// holds the messages after it for gapWait at most: the next message after that, or the
// room's next round, gives it up.
func TestRoomSkipsAGapAfterAWhile(t *testing.T) {
	for _, by := range []string{"message", "round"} {
		t.Run(by, func(t *testing.T) {
			h := New()
			h.rooms.manual = true
			now := time.Now()
			h.rooms.now = func() time.Time { return now }
			bob := watch(h, "bob", 100)
			defer bob.Close()
			h.Follow(bob.Subscription, "g1", 0, 0)
			h.OpenConversation(bob.Subscription, "g1")
			h.Message("g1", 1, "alice", msg(1))
			h.Message("g1", 3, "alice", msg(3)) // 2 is lost
			if got := bob.Take(nil); len(got) != 1 {
				t.Fatalf("%d pushes before the wait, want 1", len(got))
			}
			now = now.Add(gapWait)
			if by == "message" {
				h.Message("g1", 4, "alice", msg(4))
			} else {
				sh := h.rooms.shardOf("g1")
				sh.mu.Lock()
				rm := sh.rooms["g1"]
				sh.mu.Unlock()
				h.round("g1", rm)
			}
			got := bob.Take(nil)
			if len(got) == 0 || string(got[0].Data) != `{"seq":3}` {
				t.Fatalf("after the wait: %d pushes, want 3 first", len(got))
			}
		})
	}
}

// TestRoomFirstMessagesOutOfOrder: the first two messages of a conversation reach the hub
// in the opposite order; the open follower still gets both, in order, because the room
// knows the conversation's max_seq from the follower's listing.
func TestRoomFirstMessagesOutOfOrder(t *testing.T) {
	h := New()
	bob := watch(h, "bob", 100)
	defer bob.Close()
	h.Follow(bob.Subscription, "g1", 0, 0)
	h.OpenConversation(bob.Subscription, "g1")
	h.Message("g1", 2, "alice", msg(2))
	h.Message("g1", 1, "alice", msg(1))
	got := bob.Take(nil)
	if len(got) != 2 || string(got[0].Data) != `{"seq":1}` || string(got[1].Data) != `{"seq":2}` {
		t.Fatalf("pushes %d, want seqs 1 and 2 in order", len(got))
	}
	// A room made by a message (no follower yet) keeps a late seq for late followers.
	h.Message("g2", 6, "alice", msg(6))
	h.Message("g2", 5, "alice", msg(5))
	h.Follow(bob.Subscription, "g2", 0, 4)
	h.OpenConversation(bob.Subscription, "g2") // after Follow: no replay (open's answer says max_seq)
	carol := watch(h, "carol", 100)
	defer carol.Close()
	h.OpenConversation(carol.Subscription, "g2")
	h.Follow(carol.Subscription, "g2", 0, 4) // open before follow: a late follower, replayed
	got = carol.Take(nil)
	if len(got) != 2 || string(got[0].Data) != `{"seq":5}` || string(got[1].Data) != `{"seq":6}` {
		t.Fatalf("replay to a late follower: %d pushes, want 5 and 6", len(got))
	}
}

// TestRoomWheelSpreadsNoticesOverATurn: in a room larger than wakeSlice followers, a message
// is noticed to each follower at its slot's tick, about a twentieth of them per tick, every
// follower once within one turn of the wheel.
func TestRoomWheelSpreadsNoticesOverATurn(t *testing.T) {
	h := New()
	h.rooms.manual = true
	const n = 2 * wakeSlice
	ws := make([]watcher, n)
	for i := range ws {
		ws[i] = watch(h, fmt.Sprint("u", i), 10)
		defer ws[i].Close()
		h.Follow(ws[i].Subscription, "g1", 0, 0)
	}
	h.Message("g1", 1, "alice", msg(1))
	sh := h.rooms.shardOf("g1")
	sh.mu.Lock()
	rm := sh.rooms["g1"]
	sh.mu.Unlock()
	noticed := map[int]int{}
	for tick := range wheelSlots {
		h.round("g1", rm)
		got := 0
		for i, w := range ws {
			if ns := w.TakeNotices(nil); len(ns) > 0 {
				noticed[i]++
				got++
			}
		}
		if got > n/wheelSlots*2 {
			t.Fatalf("tick %d noticed %d of %d followers: not spread", tick, got, n)
		}
	}
	for i := range ws {
		if noticed[i] != 1 {
			t.Fatalf("follower %d noticed %d times in a turn, want once", i, noticed[i])
		}
	}
}

// TestRoomSkipsTheUsersWithTheMessageInTheirLog: a message's pushes leave out the open
// subscriptions of the users its Body skips (the mentioned members, who get it as a log
// event), also when replayed to a late follower, and go on in seq order for them after it.
func TestRoomSkipsTheUsersWithTheMessageInTheirLog(t *testing.T) {
	h := New()
	bob, carol := watch(h, "bob", 100), watch(h, "carol", 100)
	defer bob.Close()
	defer carol.Close()
	for _, w := range []watcher{bob, carol} {
		h.Follow(w.Subscription, "g1", 0, 0)
		h.OpenConversation(w.Subscription, "g1")
	}
	h.Message("g1", 1, "alice", msg(1))
	mentioned := msg(2)
	mentioned.Skip = []string{"bob"}
	h.Message("g1", 2, "alice", mentioned)
	h.Message("g1", 3, "alice", msg(3))
	seqs := func(w watcher) (out []string) {
		for _, ev := range w.Take(nil) {
			out = append(out, string(ev.Data))
		}
		return out
	}
	if got := fmt.Sprint(seqs(bob)); got != `[{"seq":1} {"seq":3}]` {
		t.Errorf("bob, mentioned in 2, got %s", got)
	}
	if got := fmt.Sprint(seqs(carol)); got != `[{"seq":1} {"seq":2} {"seq":3}]` {
		t.Errorf("carol got %s", got)
	}
	late := watch(h, "bob", 100) // another device of bob's, following late with it open
	defer late.Close()
	h.OpenConversation(late.Subscription, "g1")
	h.Follow(late.Subscription, "g1", 0, 0)
	if got := fmt.Sprint(seqs(late)); got != `[{"seq":1} {"seq":3}]` {
		t.Errorf("bob's late follower got %s", got)
	}
}
