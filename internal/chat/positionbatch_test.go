package chat_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/protocol"
)

// largeGroup is a read-fanout group of n members (m0000...) and alice, its owner, on a
// store whose commits and transactions are counted (Pebble: under -race it is several times
// faster than the SQLite engine, which is C translated to Go).
type largeGroup struct {
	svc     *chat.Service
	st      *updateCounter
	conv    string
	members []string
	commits *atomic.Int64 // storage commits (one may carry several transactions)
	cfg     chat.Config
	signer  *auth.Signer
}

// updateCounter counts the read-write transactions run on a store.
type updateCounter struct {
	store.Store
	updates atomic.Int64
}

func (s *updateCounter) Update(ctx context.Context, fn func(store.Tx) error) error {
	s.updates.Add(1)
	return s.Store.Update(ctx, fn)
}

func newLargeGroup(t *testing.T, n int) *largeGroup {
	t.Helper()
	ctx := context.Background()
	var commits atomic.Int64
	st, err := pebble.Open(ctx, pebble.Options{Dir: t.TempDir(), Relaxed: true,
		OnCommit: func(int, time.Duration) { commits.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := chat.DefaultConfig()
	cfg.WriteFanoutMax, cfg.MaxGroupMembers = 10, n+10
	uc := &updateCounter{Store: st}
	signer := auth.NewSigner([]byte("0123456789abcdef0123456789abcdef"))
	svc := chat.New(chat.Options{Store: uc, Hub: hub.New(), Signer: signer, Config: cfg})
	g := &largeGroup{svc: svc, st: uc, commits: &commits, cfg: cfg, signer: signer}
	var wg sync.WaitGroup
	for i := range n {
		g.members = append(g.members, fmt.Sprintf("m%04d", i))
	}
	for _, u := range append([]string{"alice"}, g.members...) {
		wg.Go(func() {
			if _, _, err := svc.CreateUser(ctx, u, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	c, err := svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "big", Members: g.members})
	if err != nil || c.Fanout != protocol.FanoutRead {
		t.Fatalf("group: %+v, %v; want read fanout", c, err)
	}
	g.conv = c.ConvID
	return g
}

// TestReadStormIsBatched: 2,000 members of one read-fanout group each mark read and
// delivered at once (two reads of theirs racing, one of them stale, and a delivered
// update): the updates take at most one storage commit per 10, and one store transaction
// per 10 (the store's group commit alone would meet the first, not the second: about 280
// commits of 5,500 transactions, measured without the batching), every member ends exactly
// at the largest position it asked for (never moved back by the stale one), every answer
// is a position the member reached (at least what it asked), and a read that moves
// nothing answers the current position.
func TestReadStormIsBatched(t *testing.T) {
	const n = 2000
	ctx := context.Background()
	g := newLargeGroup(t, n)
	for range 8 {
		if _, err := g.svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: g.conv, ClientMsgID: fmt.Sprint("s", idSeq.Add(1)),
			ContentType: 1, Content: []byte(`"hi"`)}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(i int) int64 { return int64(2 + i%7) } // 2..8
	before, updatesBefore := g.commits.Load(), g.st.updates.Load()
	var reads atomic.Int64
	var wg sync.WaitGroup
	for i, u := range g.members {
		for _, seq := range []int64{want(i), want(i) - 1} {
			wg.Go(func() {
				got, err := g.svc.MarkRead(ctx, me(u), g.conv, seq)
				reads.Add(1)
				if err != nil || got < seq || got > want(i) {
					t.Errorf("%s: MarkRead(%d) = %d, %v; want a position in [%d, %d]", u, seq, got, err, seq, want(i))
				}
			})
		}
		wg.Go(func() {
			got, err := g.svc.MarkDelivered(ctx, me(u), g.conv, 1)
			reads.Add(1)
			if err != nil || got < 1 {
				t.Errorf("%s: MarkDelivered(1) = %d, %v", u, got, err)
			}
		})
	}
	wg.Wait()
	commits, updates := g.commits.Load()-before, g.st.updates.Load()-updatesBefore
	t.Logf("%d position updates: %d storage commits, %d store transactions (%.1f updates a commit)",
		reads.Load(), commits, updates, float64(reads.Load())/float64(max(commits, 1)))
	if commits*10 > reads.Load() || updates*10 > reads.Load() {
		t.Errorf("%d storage commits and %d transactions for %d position updates: want at most one per 10", commits, updates, reads.Load())
	}
	if err := g.st.View(ctx, func(tx store.ReadTx) error {
		for i, u := range g.members {
			m, err := tx.Member(ctx, g.conv, u)
			if err != nil {
				return err
			}
			if m.ReadSeq != want(i) || m.DeliveredSeq != want(i) {
				t.Errorf("%s: stored read %d delivered %d, want both %d", u, m.ReadSeq, m.DeliveredSeq, want(i))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A stale read answers the current position, and emits nothing more.
	u := g.members[5]
	evs, err := g.svc.Sync(ctx, me(u), 0, 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := g.svc.MarkRead(ctx, me(u), g.conv, 1); err != nil || got != want(5) {
		t.Fatalf("stale MarkRead = %d, %v; want %d", got, err, want(5))
	}
	readEvents := 0
	for _, ev := range evs.Events {
		if ev.Type == protocol.EventRead {
			readEvents++
		}
	}
	if readEvents == 0 {
		t.Errorf("%s's log has no read event after its reads", u)
	}
	again, err := g.svc.Sync(ctx, me(u), evs.Cursor, 0, 1000, 0)
	if err != nil || len(again.Events) != 0 {
		t.Errorf("events after a stale read: %+v, %v; want none", again.Events, err)
	}
}
