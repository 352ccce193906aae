package chat_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/presence"
)

// widestCount is the presence tracker, remembering the longest list one count asked about.
type widestCount struct {
	*presence.Tracker
	widest atomic.Int64
}

func (w *widestCount) CountOnline(users []string) int {
	if n := int64(len(users)); n > w.widest.Load() {
		w.widest.Store(n)
	}
	return w.Tracker.CountOnline(users)
}

// TestLargeGroupOnlineCountSampled: a read-fanout group of 10,000 members, a quarter of
// them connected (and some of those hidden, who are not counted), gets an online_count
// estimated from a window of at most 2,000 members, close to the true count: a brief in a
// huge group costs what one in a group of 2,000 does.
func TestLargeGroupOnlineCountSampled(t *testing.T) {
	const n = 10000
	ctx := context.Background()
	g := newLargeGroup(t, 10)
	g.fill(t, n)
	tracker := presence.New(presence.Config{}, nil, nil)
	t.Cleanup(tracker.Close)
	online := 0
	for i, u := range g.members {
		switch i % 8 {
		case 0, 4:
			tracker.Connected(u, "phone")
			online++
		case 2:
			tracker.Connected(u, "phone") // connected but hidden: never counted
			tracker.SetHidden(u, true)
		}
	}
	counter := &widestCount{Tracker: tracker}
	cfg := g.cfg
	cfg.MaxGroupMembers = n + 10
	svc := chat.New(chat.Options{Store: g.st, Config: cfg, Signer: g.signer, Online: counter})
	b, err := svc.GetConversation(ctx, me("alice"), g.conv)
	if err != nil {
		t.Fatal(err)
	}
	if b.OnlineCount == nil {
		t.Fatalf("brief of a read-fanout group without online_count: %+v", b)
	}
	if w := counter.widest.Load(); w > 2000 {
		t.Errorf("one count read %d members, want at most 2,000", w)
	}
	// Online members are spread evenly, so any window of 2,000 holds a quarter of them
	// give or take the window's ends: the estimate is within a few percent.
	if got := *b.OnlineCount; got < online*95/100 || got > online*105/100 {
		t.Errorf("online_count %d, want about %d (within 5%%)", got, online)
	}
}
