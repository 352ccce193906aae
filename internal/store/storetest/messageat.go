package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// messageAtTests are the conformance tests of MessageReader.MessageAt, the time index that
// a jump to a date (chat's history around a time) reads.
func messageAtTests() []struct {
	name string
	fn   func(t *testing.T, s store.Store)
} {
	return []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"MessageAt/MatchesAScan", testMessageAtMatchesAScan},
		{"MessageAt/NotFound", testMessageAtNotFound},
	}
}

// testMessageAtMatchesAScan appends messages whose clocks repeat a millisecond, jump
// ahead and go back (which the append clamps), recalls one, and checks MessageAt against a
// scan of what is stored at every time from before the first to after the last.
func testMessageAtMatchesAScan(t *testing.T, s store.Store) {
	appendFixture(t, s)
	const base = 1_700_000_000_000
	offsets := []int64{0, 0, 0, 5, 6, 6, 100, 90, 101, 101, 250, 251, 252, 1000, 999, 998, 1500}
	for i, off := range offsets {
		m := newAppend("c1", "alice", fmt.Sprintf("at-%d", i))
		m.CreatedAt = base + off
		mustAppend(t, s, m)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 7, base+2000) })
	var stored []store.Message
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		var err error
		stored, err = tx.Messages(ctx, "c1", store.MessageRange{Limit: len(offsets) + 1})
		return err
	})
	if len(stored) != len(offsets) {
		t.Fatalf("%d messages stored, want %d", len(stored), len(offsets))
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for ts := int64(base - 2); ts <= base+1502; ts++ {
			want := int64(0)
			for _, m := range stored {
				if m.CreatedAt >= ts {
					want = m.Seq
					break
				}
			}
			got, err := tx.MessageAt(ctx, "c1", ts)
			if want == 0 {
				wantErr(t, fmt.Sprintf("MessageAt(%d) after every message", ts-base), err, store.ErrNotFound)
				continue
			}
			if err != nil || got != want {
				t.Errorf("MessageAt(base+%d) = %d, %v; want %d", ts-base, got, err, want)
			}
		}
		return nil
	})
}

// testMessageAtNotFound: a conversation without messages, and one that does not exist,
// have no message at any time.
func testMessageAtNotFound(t *testing.T, s store.Store) {
	appendFixture(t, s)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.MessageAt(ctx, "c1", 1)
		wantErr(t, "MessageAt of a conversation without messages", err, store.ErrNotFound)
		_, err = tx.MessageAt(ctx, "nope", 1)
		wantErr(t, "MessageAt of an unknown conversation", err, store.ErrNotFound)
		return nil
	})
}
