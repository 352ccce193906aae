package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// testAppendStartedInOrder: one goroutine starts a burst of appends one after another,
// waiting for none (as a WebSocket connection pipelines its sends), while other goroutines
// append to the same conversation and run Updates on the same users. The burst is applied
// in start order, whatever order its Waits come in: its seqs and each member's cursors
// increase in start order, a repeat of an earlier client id in the same burst is that
// one's duplicate, and an append that fails in the middle leaves the others alone. The
// conversation's seqs stay gapless.
func testAppendStartedInOrder(t *testing.T, s store.Store) {
	appendFixture(t, s)
	const burst, others, perOther = 200, 4, 40
	const dupOf, dupAt, failAt = 10, 20, 30
	ctx := t.Context()

	begin := make(chan struct{})
	var wg sync.WaitGroup
	for g := range others {
		wg.Go(func() {
			<-begin
			for i := range perOther {
				if g == 0 { // an Update between the appends, on a member of the conversation
					err := s.Update(ctx, func(tx store.Tx) error {
						_, err := tx.AppendEvent(ctx, store.Event{UserID: "bob", Type: "read", ConvID: "c1", TS: 1, Data: []byte(`{}`)})
						return err
					})
					if err != nil {
						t.Errorf("Update beside the burst: %v", err)
						return
					}
					continue
				}
				if _, err := s.AppendMessage(ctx, newAppend("c1", "bob", fmt.Sprintf("b%d-%d", g, i))); err != nil {
					t.Errorf("bob's append beside the burst: %v", err)
					return
				}
			}
		})
	}
	close(begin)
	pending := make([]store.PendingAppend, burst)
	for i := range burst {
		m := newAppend("c1", "alice", fmt.Sprint("a", i))
		switch i {
		case dupAt:
			m.ClientMsgID, m.MsgID = fmt.Sprint("a", dupOf), "another-msg-id"
		case failAt:
			m.ConvID = "missing"
		}
		p, err := s.StartAppend(ctx, m)
		if err != nil {
			t.Fatalf("StartAppend %d: %v", i, err)
		}
		pending[i] = p
	}
	results := make([]store.Appended, burst)
	for i := burst - 1; i >= 0; i-- { // the order of the Waits does not matter
		res, err := pending[i].Wait()
		if i == failAt {
			wantErr(t, "the append to a missing conversation", err, store.ErrNotMember)
			continue
		}
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		results[i] = res
	}
	wg.Wait()

	if res := results[dupAt]; !res.Duplicate || !reflect.DeepEqual(res.Message, results[dupOf].Message) {
		t.Errorf("the repeat of a%d in the same burst = %+v, want the original %+v", dupOf, res, results[dupOf].Message)
	}
	var prev store.Appended
	for i, res := range results {
		if i == dupAt || i == failAt {
			continue
		}
		if res.Duplicate || res.Message.ClientMsgID != fmt.Sprint("a", i) {
			t.Fatalf("append %d = %+v, want a new message a%d", i, res, i)
		}
		if i > 0 && (res.Message.Seq <= prev.Message.Seq || !cursorsAfter(res.Events, prev.Events)) {
			t.Fatalf("append %d got seq %d, events %v after seq %d, events %v: not in start order",
				i, res.Message.Seq, res.Events, prev.Message.Seq, prev.Events)
		}
		prev = res
	}
	total := burst - 2 + (others-1)*perOther
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		ms, err := tx.Messages(ctx, "c1", store.MessageRange{Limit: total + 1})
		if err != nil {
			return err
		}
		if got := seqsOf(ms); len(got) != total || got[0] != 1 || got[len(got)-1] != int64(total) {
			t.Errorf("c1 holds seqs %v, want 1..%d", got, total)
		}
		return nil
	})
}

// cursorsAfter reports whether every user's cursor in evs is above that user's in prev.
func cursorsAfter(evs, prev []store.Delivery) bool {
	for _, d := range evs {
		i := slices.IndexFunc(prev, func(p store.Delivery) bool { return p.UserID == d.UserID })
		if i < 0 || d.Cursor <= prev[i].Cursor {
			return false
		}
	}
	return len(evs) == len(prev)
}

// seqsOf returns the seq of each message.
func seqsOf(ms []store.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}
