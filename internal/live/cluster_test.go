package live_test

import (
	"maps"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/tasks"
)

// countingBus is a bus that knows how many subscriptions each subject has.
type countingBus struct {
	bus.Bus
	mu   sync.Mutex // guards subs
	subs map[string]int
}

func (b *countingBus) Subscribe(subject string, handler func([]byte)) (bus.Subscription, error) {
	s, err := b.Bus.Subscribe(subject, handler)
	if err == nil {
		b.mu.Lock()
		b.subs[subject]++
		b.mu.Unlock()
	}
	return countedSub{s, b, subject}, err
}

type countedSub struct {
	bus.Subscription
	b       *countingBus
	subject string
}

func (s countedSub) Unsubscribe() error {
	s.b.mu.Lock()
	if s.b.subs[s.subject]--; s.b.subs[s.subject] == 0 {
		delete(s.b.subs, s.subject)
	}
	s.b.mu.Unlock()
	return s.Subscription.Unsubscribe()
}

func (b *countingBus) subscribed() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.subs)
}

// TestClusterSubscribesWhileInterested: a node on a bus subscribes to a user's subject once,
// while it has at least one subscription of the user, and to a conversation's while it has
// a room or a watch of it; always to revocations; and never twice to one subject.
func TestClusterSubscribesWhileInterested(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{})
	defer m.Close()
	b := &countingBus{Bus: m, subs: map[string]int{}}
	h := hub.New()
	g := tasks.New()
	defer g.Close()
	h.SetInterest(live.NewCluster(live.ClusterOptions{Bus: b, Hub: h, Node: "n_test", Tasks: g}))
	want := func(step string, subjects ...string) {
		t.Helper()
		w := map[string]int{"parley.revoke": 1}
		for _, s := range subjects {
			w[s] = 1
		}
		if got := b.subscribed(); !maps.Equal(got, w) {
			t.Fatalf("%s: subscribed to %v, want %v", step, got, w)
		}
	}
	want("at start")

	user := bus.UserSubject("alice")
	ws := h.Watch("alice", 8, func() {})
	poll := h.Subscribe("alice", 4)
	want("two subscriptions of alice", user)
	ws.Close()
	want("one left", user)
	poll.Close()
	want("none left")

	conv := bus.ConvSubject("g_big")
	ws = h.Watch("alice", 8, func() {})
	h.Follow(ws, "g_big", 0, 0)
	w := h.WatchConversations([]string{"g_big"})
	want("a room and a watch", user, conv)
	h.Unfollow(ws, "g_big")
	want("the watch", user, conv)
	w.Close()
	want("neither", user)
	ws.Close()
	want("nothing")
}
