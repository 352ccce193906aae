package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// The concurrency tests run many writers against one user's log or one conversation, each
// write in an Update of its own, and check that the numbers the store hands out stay
// distinct and gapless. Update fns report with t.Errorf: they may run on the backend's
// writer goroutine.

// handOut runs fn in goroutines*perGoroutine Updates, perGoroutine at a time on each of
// goroutines goroutines. fn returns the number the store handed its Update (a cursor, a
// seq) and what the Update wrote under it. handOut fails the test when an Update fails or a
// number is handed out twice, and returns each number with what was written under it.
func handOut[V any](t *testing.T, s store.Store, goroutines, perGoroutine int,
	fn func(ctx context.Context, tx store.Tx, g, i int) (int64, V, error)) map[int64]V {
	t.Helper()
	var mu sync.Mutex
	got := make(map[int64]V, goroutines*perGoroutine)
	runConcurrently(goroutines, perGoroutine, func(g, i int) {
		var n int64
		var v V
		err := s.Update(t.Context(), func(tx store.Tx) (err error) {
			n, v, err = fn(t.Context(), tx, g, i)
			return err
		})
		if err != nil {
			t.Errorf("goroutine %d, Update %d: %v", g, i, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, taken := got[n]; taken {
			t.Errorf("%d handed to two Updates (which wrote %v and %v)", n, prev, v)
		}
		got[n] = v
	})
	if len(got) != goroutines*perGoroutine {
		t.Errorf("%d distinct numbers handed to %d Updates", len(got), goroutines*perGoroutine)
	}
	return got
}

// testConcurrentEventsOneUser: goroutines append events to one user's log concurrently.
// Every Update gets a distinct cursor, the log holds cursors 1..N without a gap, and the
// event under each cursor is the one whose Update was given that cursor.
func testConcurrentEventsOneUser(t *testing.T, h Harness) {
	const goroutines, perGoroutine = 16, 100
	const n = goroutines * perGoroutine
	s := h.fresh(t)
	createUsers(t, s, "alice")
	tsOf := handOut(t, s, goroutines, perGoroutine, func(ctx context.Context, tx store.Tx, g, i int) (int64, int64, error) {
		ts := int64(g*perGoroutine + i)
		cursor, err := tx.AppendEvent(ctx, readEvent("alice", ts))
		return cursor, ts, err
	})
	log := readLog(t, s, "alice", 0)
	wantCursors(t, log, 1, n)
	for _, e := range log {
		if want, ok := tsOf[e.Cursor]; !ok || e.TS != want {
			t.Errorf("event %d has TS %d; the Update given cursor %d appended TS %d (returned: %v)",
				e.Cursor, e.TS, e.Cursor, want, ok)
		}
	}
	if got := cursorsOf(t, s, "alice"); got.Last != n {
		t.Errorf("Cursors = %+v, want Last %d", got, n)
	}
}

// testConcurrentMessagesOneConversation: goroutines send messages into one conversation
// concurrently, each the way chat does under the current contract, in an Update of its
// own: read the conversation, insert the message at MaxSeq+1, write MaxSeq back.
// Serializable Updates give every message a distinct seq, the conversation holds seqs
// 1..N without a gap, and MaxSeq ends at N.
func testConcurrentMessagesOneConversation(t *testing.T, h Harness) {
	const goroutines, perGoroutine = 16, 50
	const n = goroutines * perGoroutine
	s := h.fresh(t)
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.CreateConversation(ctx, newConversation("c1"))
	})
	idOf := handOut(t, s, goroutines, perGoroutine, func(ctx context.Context, tx store.Tx, g, i int) (int64, string, error) {
		id := fmt.Sprintf("m-%d-%d", g, i)
		c, err := tx.Conversation(ctx, "c1")
		if err != nil {
			return 0, id, err
		}
		c.MaxSeq++
		m := newMessage("c1", c.MaxSeq, fmt.Sprint("sender-", g))
		m.MsgID, m.ClientMsgID = id, id
		if err := tx.InsertMessage(ctx, m); err != nil {
			return 0, id, err
		}
		c.UpdatedAt = m.CreatedAt
		return m.Seq, id, tx.UpdateConversation(ctx, c)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if c, err := tx.Conversation(ctx, "c1"); err != nil || c.MaxSeq != n {
			t.Errorf("Conversation = %+v, %v; want MaxSeq %d", c, err, n)
		}
		ms, err := tx.Messages(ctx, "c1", store.MessageRange{Limit: n + 1})
		if err != nil {
			return err
		}
		if len(ms) != n {
			t.Errorf("conversation holds %d messages, want %d", len(ms), n)
		}
		for i, m := range ms {
			if m.Seq != int64(i+1) {
				t.Fatalf("message %d has seq %d, want %d (gapless, ascending)", i, m.Seq, i+1)
			}
			if m.MsgID != idOf[m.Seq] {
				t.Errorf("seq %d holds message %s; the Update that inserted it was %q", m.Seq, m.MsgID, idOf[m.Seq])
			}
		}
		return nil
	})
}
