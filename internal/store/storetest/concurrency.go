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

// testConcurrentEventsOneUser: goroutines append events to one user's log concurrently.
// Every Update gets a distinct cursor, the log holds cursors 1..N without a gap, and the
// event under each cursor is the one whose Update was given that cursor.
func testConcurrentEventsOneUser(t *testing.T, h Harness) {
	const goroutines, perGoroutine = 16, 100
	const n = goroutines * perGoroutine
	s := h.fresh(t)
	createUsers(t, s, "alice")
	var mu sync.Mutex
	tsOf := make(map[int64]int64, n) // cursor returned to an Update -> the TS it appended
	runConcurrently(goroutines, perGoroutine, func(g, i int) {
		ts := int64(g*perGoroutine + i)
		var cursor int64
		err := s.Update(t.Context(), func(tx store.Tx) (err error) {
			cursor, err = tx.AppendEvent(t.Context(), readEvent("alice", ts))
			return err
		})
		if err != nil {
			t.Errorf("goroutine %d, Update %d: %v", g, i, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, taken := tsOf[cursor]; taken {
			t.Errorf("cursor %d returned to two Updates (TS %d and %d)", cursor, prev, ts)
		}
		tsOf[cursor] = ts
	})
	if len(tsOf) != n {
		t.Errorf("%d distinct cursors returned to %d Updates", len(tsOf), n)
	}
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
	var mu sync.Mutex
	idOf := make(map[int64]string, n) // seq an Update inserted -> its message id
	runConcurrently(goroutines, perGoroutine, func(g, i int) {
		id := fmt.Sprintf("m-%d-%d", g, i)
		var seq int64
		err := s.Update(t.Context(), func(tx store.Tx) error {
			ctx := t.Context()
			c, err := tx.Conversation(ctx, "c1")
			if err != nil {
				return err
			}
			c.MaxSeq++
			seq = c.MaxSeq
			m := newMessage("c1", seq, fmt.Sprint("sender-", g))
			m.MsgID, m.ClientMsgID = id, id
			if err := tx.InsertMessage(ctx, m); err != nil {
				return err
			}
			c.UpdatedAt = m.CreatedAt
			return tx.UpdateConversation(ctx, c)
		})
		if err != nil {
			t.Errorf("goroutine %d, Update %d: %v", g, i, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, taken := idOf[seq]; taken {
			t.Errorf("seq %d given to two messages (%s and %s)", seq, prev, id)
		}
		idOf[seq] = id
	})
	if len(idOf) != n {
		t.Errorf("%d distinct seqs given to %d messages", len(idOf), n)
	}
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
