package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// writeEverything stores, through s, a row of every kind: two users, a conversation with
// both as members, two messages (the second recalled) with their events, a pruned event
// and a non-message event.
func writeEverything(t *testing.T, s store.Store) {
	t.Helper()
	createUsers(t, s, "alice", "bob")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		c := newConversation("c1")
		c.ReadDetail, c.MaxSeq = true, 2
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		for i, u := range []string{"alice", "bob"} {
			m := store.Member{ConvID: "c1", UserID: u, JoinedAt: 5, Ordinal: int64(i), ReadSeq: 1, DeliveredSeq: 2}
			if err := tx.PutMember(ctx, m); err != nil {
				return err
			}
		}
		for seq := int64(1); seq <= 2; seq++ {
			if err := tx.InsertMessage(ctx, newMessage("c1", seq, "alice")); err != nil {
				return err
			}
			for i, u := range []string{"alice", "bob"} {
				if _, err := tx.AppendEvent(ctx, messageEvent(u, "c1", seq, 100+10*int64(i)+seq)); err != nil {
					return err
				}
			}
		}
		if err := tx.RecallMessage(ctx, "c1", 2, 1_700_000_009_000); err != nil {
			return err
		}
		return nil
	})
	if _, err := s.PruneEvents(t.Context(), 102, 10); err != nil { // alice's cursor 1 only
		t.Fatalf("PruneEvents: %v", err)
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.AppendEvent(ctx, readEvent("bob", 200))
		return err
	})
}

// everything is what readEverything reads back of writeEverything's rows.
type everything struct {
	Users       []store.User
	Cursors     []store.CursorBounds
	Events      [][]store.Event
	Memberships [][]store.Membership
	Conv        store.Conversation
	Members     []store.Member
	Messages    []store.Message
	ByClientID  store.Message
}

// readEverything reads every row writeEverything stored, failing the test on an error.
func readEverything(t *testing.T, s store.Store) (e everything) {
	t.Helper()
	view(t, s, func(ctx context.Context, tx store.ReadTx) (err error) {
		for _, id := range []string{"alice", "bob"} {
			u, err := tx.User(ctx, id)
			if err != nil {
				return err
			}
			b, err := tx.Cursors(ctx, id)
			if err != nil {
				return err
			}
			es, err := tx.Events(ctx, id, 0, 100)
			if err != nil {
				return err
			}
			ms, err := tx.Memberships(ctx, id)
			if err != nil {
				return err
			}
			e.Users, e.Cursors = append(e.Users, u), append(e.Cursors, b)
			e.Events, e.Memberships = append(e.Events, es), append(e.Memberships, ms)
		}
		if e.Conv, err = tx.Conversation(ctx, "c1"); err != nil {
			return err
		}
		if e.Members, err = tx.Members(ctx, "c1"); err != nil {
			return err
		}
		if e.Messages, err = tx.Messages(ctx, "c1", store.MessageRange{Limit: 10}); err != nil {
			return err
		}
		e.ByClientID, err = tx.MessageByClientID(ctx, "alice", newMessage("c1", 1, "alice").ClientMsgID)
		return err
	})
	return e
}

// testReopenKeepsEverything closes a store and opens it again on the same state: every
// row reads back the same, and the next cursor follows the last one assigned.
func testReopenKeepsEverything(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	writeEverything(t, s)
	before := readEverything(t, s)
	if before.Cursors[0].Pruned != 1 || len(before.Messages) != 2 || !before.Messages[1].Recalled ||
		len(before.Events[1]) != 3 || len(before.Memberships[0]) != 1 || len(before.Members) != 2 {
		t.Fatalf("the rows written before Close are not all there: %+v", before)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	if after := readEverything(t, s); !reflect.DeepEqual(after, before) {
		t.Errorf("after reopen:\n%+v\nwant:\n%+v", after, before)
	}
	if got := appendEvents(t, s, "bob", 300); got[0] != 4 {
		t.Errorf("AppendEvent after reopen = cursor %d, want 4", got[0])
	}
	if got := appendEvents(t, s, "alice", 300); got[0] != 3 {
		t.Errorf("AppendEvent after reopen = cursor %d, want 3 (pruned ones are not reused)", got[0])
	}
}

// testKeptTxIsRefused: a Tx or ReadTx used after its Update or View returned fails, and
// a write through it is not stored.
func testKeptTxIsRefused(t *testing.T, h Harness) {
	s := h.fresh(t)
	ctx := t.Context()
	createUsers(t, s, "alice")
	var kept store.Tx
	if err := s.Update(ctx, func(tx store.Tx) error { kept = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := kept.CreateUser(ctx, newUser("late")); err == nil {
		t.Error("a Tx kept after its Update returned still wrote")
	}
	var keptView store.ReadTx
	if err := s.View(ctx, func(tx store.ReadTx) error { keptView = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := keptView.User(ctx, "alice"); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("a ReadTx kept after its View returned: User = %v, want an error other than ErrNotFound", err)
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.User(ctx, "late")
		wantErr(t, "User written through a kept Tx", err, store.ErrNotFound)
		return nil
	})
}
