package push

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/store"
)

// feedNode is one node's Feed on a shared bus and store; its pusher does not run (another
// node leads), as on most nodes of a cluster.
func feedNode(t *testing.T, b bus.Bus, st store.Store) *Feed {
	t.Helper()
	p := New(Options{Store: st, Facts: fakeFacts{}, Providers: map[string]Provider{FCM: newFakeProvider()}})
	f, err := NewFeed(b, p, NewPresence(nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// feedTap collects the feed messages published on b.
func feedTap(t *testing.T, b bus.Bus) <-chan feedMsg {
	t.Helper()
	c := make(chan feedMsg, 64)
	if _, err := b.Subscribe(FeedSubject, func(data []byte) {
		var m feedMsg
		if err := json.Unmarshal(data, &m); err != nil {
			t.Errorf("feed message: %v", err)
		}
		c <- m
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// news has f publish what it gathered and returns the users named in its wakes and in its
// sent and took news.
func news(t *testing.T, f *Feed, tap <-chan feedMsg) map[string]bool {
	t.Helper()
	f.publish(context.Background())
	for { // the tap may hold an earlier message; the wanted one is the last
		select {
		case m := <-tap:
			got := map[string]bool{}
			for u := range m.Wakes {
				got[u] = true
			}
			for _, d := range append(m.Sent, m.Took...) {
				got[d.User] = true
			}
			if len(tap) == 0 {
				return got
			}
		case <-time.After(10 * time.Second): // a bound on failure, not a synchronisation
			t.Fatal("no feed message published")
			return nil
		}
	}
}

// waitFor fails the test unless cond holds within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (f *Feed) registeredUser(u string) bool {
	sh := f.shard(u)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.registered[u]
	return ok
}

// A node sends news only of users with push registrations, learns of a registration made
// on another node from the bus, and forgets a user whose registrations went when it reads
// the store again.
func TestFeedSendsNewsOnlyOfRegisteredUsers(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{}) // bob has a phone registered, alice nothing
	b := bus.NewMemory(bus.MemoryOptions{})
	t.Cleanup(func() { b.Close() })
	a, other := feedNode(t, b, w.st), feedNode(t, b, w.st)
	tap := feedTap(t, b)
	ctx := context.Background()

	// Before the registered users are read, every user's news goes out.
	a.Notify("alice", 1)
	a.Sent("alice", "laptop", 1)
	if got := news(t, a, tap); !got["alice"] {
		t.Fatalf("before the first read: news of %v, want alice's", got)
	}

	if err := a.loadRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	a.Notify("alice", 2)
	a.Sent("alice", "laptop", 2)
	a.Took("alice", "laptop", 2)
	a.Notify("bob", 5)
	a.Sent("bob", "phone", 5)
	if got := news(t, a, tap); got["alice"] || !got["bob"] {
		t.Fatalf("news of %v, want bob's only", got)
	}
	if live, taken := a.pres.state("alice", "laptop", time.Minute); taken != 0 {
		t.Fatalf("presence recorded alice's laptop (live %v, taken %d): it has nothing to push", live, taken)
	}

	// Alice registers through the other node.
	if err := w.st.Update(ctx, func(tx store.Tx) error {
		return tx.PutPushTarget(ctx, store.PushTarget{UserID: "alice", DeviceID: "laptop", Provider: FCM, Token: "tok-alice", RegisteredAt: 2})
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.Reload(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node a learns of alice's registration", func() bool { return a.registeredUser("alice") })
	a.Notify("alice", 3)
	if got := news(t, a, tap); !got["alice"] {
		t.Fatalf("after alice registered: news of %v, want alice's", got)
	}

	// Bob's registration goes: the next read of the store drops him.
	if err := w.st.Update(ctx, func(tx store.Tx) error { return tx.DeletePushTarget(ctx, "bob", "phone") }); err != nil {
		t.Fatal(err)
	}
	if err := a.loadRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	a.Notify("bob", 6)
	a.Notify("alice", 4)
	if got := news(t, a, tap); got["bob"] || !got["alice"] {
		t.Fatalf("after bob's registration went: news of %v, want alice's only", got)
	}
}

// TestFeedBelievesOtherNodesForAWhileOnly: on the pushing node, a feed message from the
// bus that claims bob's phone is connected and has taken every event makes the phone live
// for at most remoteTTL after it: a forger cannot silence bob's pushes for good. A feed
// message with an id or cursor out of form is dropped whole. What this node's own gateway
// tells is believed as before.
func TestFeedBelievesOtherNodesForAWhileOnly(t *testing.T) {
	w := newWorld(t, t.TempDir(), Options{})
	b := bus.NewMemory(bus.MemoryOptions{})
	t.Cleanup(func() { b.Close() })
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	pres := NewPresence(clock)
	p := New(Options{Store: w.st, Facts: fakeFacts{}, Providers: map[string]Provider{FCM: newFakeProvider()}, Presence: pres})
	p.leading.Store(true) // this node pushes
	if _, err := NewFeed(b, p, pres, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	forge := func(m string) {
		if err := b.Publish(context.Background(), FeedSubject, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	const grace = 3 * time.Second

	forge(`{"o":[{"u":"bob","d":"laptop"}],"t":[{"u":"bob","d":"laptop","c":-1}]}`)  // a cursor out of range
	forge(`{"t":[{"u":"bob","d":"laptop","c":5}],"o":[{"u":"bob\n","d":"laptop"}]}`) // a user id of no form
	forge(`{"o":[{"u":"bob","d":"phone"}],"t":[{"u":"bob","d":"phone","c":9007199254740991}]}`)
	waitFor(t, "the forged news taken", func() bool { live, taken := pres.state("bob", "phone", grace); return live && taken > 0 })
	if live, taken := pres.state("bob", "laptop", grace); live || taken != 0 {
		t.Fatalf("laptop live %v, taken %d: a malformed feed message was applied", live, taken)
	}

	pres.Took("bob", "tablet", 4) // this node's own
	mu.Lock()
	now = now.Add(remoteTTL)
	mu.Unlock()
	if live, taken := pres.state("bob", "phone", grace); live || taken != 0 {
		t.Fatalf("remoteTTL after the forged news: live %v, taken %d; want offline with nothing taken", live, taken)
	}
	if _, taken := pres.state("bob", "tablet", grace); taken != 4 {
		t.Fatalf("this node's own news: taken %d, want 4", taken)
	}
}
