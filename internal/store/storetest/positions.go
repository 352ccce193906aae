package storetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// testPositionsOnlyAdvance: AdvancePositions keeps the larger of the stored and the asked
// position for each of read and delivered, says whether either moved, and refuses a
// non-member.
func testPositionsOnlyAdvance(t *testing.T, s store.Store) {
	appendFixture(t, s)
	steps := []struct {
		read, delivered   int64
		wantRead, wantDel int64
		moved             bool
	}{
		{5, 5, 5, 5, true},
		{3, 7, 5, 7, true},   // read stays, delivered moves
		{4, 4, 5, 7, false},  // stale: nothing moves
		{9, 0, 9, 7, true},   // delivered is not lowered
		{9, 7, 9, 7, false},  // the same again
		{0, 12, 9, 12, true}, // delivered alone
	}
	for i, st := range steps {
		var got store.Member
		var moved bool
		update(t, s, func(ctx context.Context, tx store.Tx) (err error) {
			got, moved, err = tx.AdvancePositions(ctx, "c1", "bob", st.read, st.delivered)
			return err
		})
		if got.ReadSeq != st.wantRead || got.DeliveredSeq != st.wantDel || moved != st.moved || got.UserID != "bob" {
			t.Errorf("step %d: AdvancePositions(%d, %d) = %+v, moved %v; want read %d, delivered %d, moved %v",
				i, st.read, st.delivered, got, moved, st.wantRead, st.wantDel, st.moved)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		m, err := tx.Member(ctx, "c1", "bob")
		if err != nil || m.ReadSeq != 9 || m.DeliveredSeq != 12 || m.Ordinal != 2 {
			t.Errorf("bob after the steps = %+v, %v; want read 9, delivered 12, the rest kept", m, err)
		}
		return nil
	})
	err := s.Update(t.Context(), func(tx store.Tx) error {
		_, _, err := tx.AdvancePositions(t.Context(), "c1", "carol", 1, 1)
		return err
	})
	wantErr(t, "AdvancePositions of a non-member", err, store.ErrNotFound)
}

// testPositionsConcurrent: positions advanced side by side, each in its own Update, end at
// the largest asked, and each Update that reported a move saw a position no later Update
// lowered.
func testPositionsConcurrent(t *testing.T, s store.Store) {
	appendFixture(t, s)
	const workers, each = 8, 25
	var mu sync.Mutex
	var maxRead, maxDel int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				r, d := rand.Int64N(1000), rand.Int64N(1000)
				var got store.Member
				err := s.Update(context.Background(), func(tx store.Tx) (err error) {
					got, _, err = tx.AdvancePositions(context.Background(), "c1", "alice", r, d)
					return err
				})
				if err != nil {
					t.Errorf("AdvancePositions: %v", err)
					return
				}
				if got.ReadSeq < r || got.DeliveredSeq < d {
					t.Errorf("AdvancePositions(%d, %d) left %d, %d: below what was asked", r, d, got.ReadSeq, got.DeliveredSeq)
				}
				mu.Lock()
				maxRead, maxDel = max(maxRead, r), max(maxDel, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		m, err := tx.Member(ctx, "c1", "alice")
		if err != nil || m.ReadSeq != maxRead || m.DeliveredSeq != maxDel {
			t.Errorf("alice = %+v, %v; want read %d, delivered %d, the largest asked", m, err, maxRead, maxDel)
		}
		return nil
	})
}
