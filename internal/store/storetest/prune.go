package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// testPruneBesideAppends: retention passes running while events are appended (a backend
// may run them beside its writer) never make an append reuse a cursor, even when they
// remove the newest event, and leave the log a gapless suffix above Pruned.
func testPruneBesideAppends(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	const appends = 300
	cursors := make([]int64, 0, appends)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for range appends {
			var c int64
			err := s.Update(context.Background(), func(tx store.Tx) (err error) {
				c, err = tx.AppendEvent(context.Background(), readEvent("alice", 1)) // old at once
				return err
			})
			if err != nil {
				t.Errorf("AppendEvent: %v", err)
				return
			}
			cursors = append(cursors, c)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.PruneEvents(context.Background(), 2, 7); err != nil {
				t.Errorf("PruneEvents: %v", err)
				return
			}
		}
	})
	wg.Wait()
	for i, c := range cursors {
		if c != int64(i+1) {
			t.Fatalf("append %d got cursor %d: cursors %v are not 1..%d", i, c, cursors, appends)
		}
	}
	b := cursorsOf(t, s, "alice")
	if b.Last != appends || b.Pruned > b.Last {
		t.Errorf("Cursors = %+v, want Last %d and Pruned at most that", b, appends)
	}
	wantCursors(t, readLog(t, s, "alice", 0), b.Pruned+1, b.Last)
}
