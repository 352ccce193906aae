package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// appendEvents appends one "read" event per ts to the user's log, in one Update, and
// returns the cursors assigned.
func appendEvents(t testing.TB, s store.Store, userID string, ts ...int64) []int64 {
	t.Helper()
	var cursors []int64
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		cursors = cursors[:0]
		for _, at := range ts {
			c, err := tx.AppendEvent(ctx, readEvent(userID, at))
			if err != nil {
				return err
			}
			cursors = append(cursors, c)
		}
		return nil
	})
	return cursors
}

// readEvent returns a non-message event fixture.
func readEvent(userID string, ts int64) store.Event {
	return store.Event{
		UserID: userID, Type: protocol.EventRead, ConvID: "c1", TS: ts,
		Data: fmt.Appendf(nil, `{"user_id":%q,"read_seq":%d}`, userID, ts),
	}
}

// messageEvent returns the "message" event of (convID, seq) for userID.
func messageEvent(userID, convID string, seq, ts int64) store.Event {
	return store.Event{UserID: userID, Type: protocol.EventMessage, ConvID: convID, TS: ts, Seq: seq}
}

// readLog returns every event of the user after the cursor.
func readLog(t testing.TB, s store.Store, userID string, after int64) []store.Event {
	t.Helper()
	var all []store.Event
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		for {
			page, err := tx.Events(ctx, userID, after, 500)
			if err != nil || len(page) == 0 {
				return err
			}
			all = append(all, page...)
			after = page[len(page)-1].Cursor
		}
	})
	return all
}

// cursorsOf returns the user's cursor bounds.
func cursorsOf(t testing.TB, s store.Store, userID string) store.CursorBounds {
	t.Helper()
	var b store.CursorBounds
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
		b, err = tx.Cursors(ctx, userID)
		return err
	})
	return b
}

// wantCursors fails the test unless the log holds exactly cursors from..to, ascending.
func wantCursors(t testing.TB, events []store.Event, from, to int64) {
	t.Helper()
	if n := to - from + 1; int64(len(events)) != max(n, 0) {
		t.Fatalf("log holds %d events, want cursors %d..%d", len(events), from, to)
	}
	for i, e := range events {
		if e.Cursor != from+int64(i) {
			t.Fatalf("event %d has cursor %d, want %d (gapless, ascending)", i, e.Cursor, from+int64(i))
		}
	}
}

func testEventAppendGapless(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	var got []int64
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		got = got[:0]
		for _, u := range []string{"alice", "bob", "alice", "alice", "bob"} {
			c, err := tx.AppendEvent(ctx, readEvent(u, 1))
			if err != nil {
				return err
			}
			got = append(got, c)
		}
		return nil
	})
	if want := []int64{1, 1, 2, 3, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("cursors = %v, want %v (per user, independent)", got, want)
	}
	if got := appendEvents(t, s, "bob", 2); got[0] != 3 {
		t.Errorf("next cursor of bob in a later Update = %d, want 3", got[0])
	}
	wantCursors(t, readLog(t, s, "alice", 0), 1, 3)
	wantCursors(t, readLog(t, s, "bob", 0), 1, 3)
}

func testEventAppendUnknownUser(t *testing.T, s store.Store) {
	err := s.Update(t.Context(), func(tx store.Tx) error {
		_, err := tx.AppendEvent(t.Context(), readEvent("nobody", 1))
		return err
	})
	wantErr(t, "AppendEvent for an unknown user", err, store.ErrNotFound)
}

func testEventsRead(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	appendEvents(t, s, "alice", 10, 11, 12, 13, 14)
	appendEvents(t, s, "bob", 20)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		es, err := tx.Events(ctx, "alice", 1, 2)
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		want := []store.Event{readEvent("alice", 11), readEvent("alice", 12)}
		want[0].Cursor, want[1].Cursor = 2, 3
		if !reflect.DeepEqual(es, want) {
			t.Errorf("Events(after 1, limit 2) = %+v, want %+v", es, want)
		}
		if es, err := tx.Events(ctx, "alice", 5, 10); err != nil || len(es) != 0 {
			t.Errorf("Events after the last cursor = %v, %v; want empty", es, err)
		}
		if es, err := tx.Events(ctx, "nobody", 0, 10); err != nil || len(es) != 0 {
			t.Errorf("Events of an unknown user = %v, %v; want empty", es, err)
		}
		return nil
	})
}

func testEventsMessagePayload(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for seq := int64(1); seq <= 2; seq++ {
			if err := tx.InsertMessage(ctx, newMessage("c1", seq, "alice")); err != nil {
				return err
			}
			for _, u := range []string{"alice", "bob"} {
				if _, err := tx.AppendEvent(ctx, messageEvent(u, "c1", seq, 100+seq)); err != nil {
					return err
				}
			}
		}
		_, err := tx.AppendEvent(ctx, readEvent("bob", 200))
		return err
	})
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RecallMessage(ctx, "c1", 2, 1_700_000_009_000) })
	recalled := newMessage("c1", 2, "alice")
	recalled.Content, recalled.Extra, recalled.Recalled = nil, nil, true
	first := newMessage("c1", 1, "alice")
	es := readLog(t, s, "bob", 0)
	wantCursors(t, es, 1, 3)
	for i, want := range []*store.Message{&first, &recalled, nil} {
		if !reflect.DeepEqual(es[i].Message, want) {
			t.Errorf("event %d Message = %+v, want %+v", es[i].Cursor, es[i].Message, want)
		}
	}
	if es[0].Type != protocol.EventMessage || es[0].Seq != 1 || es[0].ConvID != "c1" || es[0].UserID != "bob" {
		t.Errorf("message event = %+v, want type message, c1/1, user bob", es[0])
	}
}

func testEventCursors(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	appendEvents(t, s, "alice", 1, 2, 3)
	if got, want := cursorsOf(t, s, "alice"), (store.CursorBounds{Last: 3}); got != want {
		t.Errorf("Cursors(alice) = %+v, want %+v", got, want)
	}
	if got := cursorsOf(t, s, "bob"); got != (store.CursorBounds{}) {
		t.Errorf("Cursors of a user without events = %+v, want zero", got)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.Cursors(ctx, "nobody")
		wantErr(t, "Cursors of an unknown user", err, store.ErrNotFound)
		return nil
	})
}

func testEventPrune(t *testing.T, s store.Store) {
	createUsers(t, s, "alice", "bob")
	appendEvents(t, s, "alice", 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	appendEvents(t, s, "bob", 15, 16, 17, 18, 19)
	steps := []struct {
		name          string
		before        int64
		limit         int
		removed       int
		alice, bobLog store.CursorBounds
	}{
		{"older than 13", 13, 100, 3, store.CursorBounds{Last: 10, Pruned: 3}, store.CursorBounds{Last: 5}},
		{"limit takes the oldest", 100, 2, 2, store.CursorBounds{Last: 10, Pruned: 5}, store.CursorBounds{Last: 5}},
		{"nothing older", 12, 100, 0, store.CursorBounds{Last: 10, Pruned: 5}, store.CursorBounds{Last: 5}},
		{"everything", 100, 100, 10, store.CursorBounds{Last: 10, Pruned: 10}, store.CursorBounds{Last: 5, Pruned: 5}},
	}
	for _, st := range steps {
		removed, err := s.PruneEvents(t.Context(), st.before, st.limit)
		if err != nil {
			t.Fatalf("%s: PruneEvents: %v", st.name, err)
		}
		if removed != st.removed {
			t.Errorf("%s: PruneEvents removed %d, want %d", st.name, removed, st.removed)
		}
		if got := cursorsOf(t, s, "alice"); got != st.alice {
			t.Errorf("%s: Cursors(alice) = %+v, want %+v", st.name, got, st.alice)
		}
		if got := cursorsOf(t, s, "bob"); got != st.bobLog {
			t.Errorf("%s: Cursors(bob) = %+v, want %+v", st.name, got, st.bobLog)
		}
		wantCursors(t, readLog(t, s, "alice", 0), st.alice.Pruned+1, st.alice.Last)
	}
	if got := appendEvents(t, s, "alice", 30); got[0] != 11 {
		t.Errorf("cursor after pruning everything = %d, want 11", got[0])
	}
}
