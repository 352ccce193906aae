package storetest

import (
	"context"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// testConversationRetention: a group's own retention (RetentionMS) is set the way a
// rename sets the name, read back by Conversation and Memberships, cleared again, and
// kept across a reopen, on a write-fanout and on a read-fanout conversation (an engine
// that stores optional fields only when set stores both kinds differently).
func testConversationRetention(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.Open(t, Config{Dir: dir})
	big := newConversation("c2")
	big.ReadFrom, big.Mark = 1, 3
	plain := newConversation("c3")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, c := range []store.Conversation{newConversation("c1"), big, plain} {
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
		}
		return tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice", Ordinal: 1})
	})
	set := func(id string, ms int64) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx store.Tx) error { // read and written back, as a rename
			c, err := tx.Conversation(ctx, id)
			if err != nil {
				return err
			}
			c.RetentionMS = ms
			return tx.UpdateConversation(ctx, c)
		})
	}
	want := map[string]int64{"c1": 3_600_000, "c2": 86_400_000, "c3": 0}
	set("c1", 7_200_000)
	set("c1", want["c1"])
	set("c2", want["c2"])
	set("c3", 60_000)
	set("c3", 0) // cleared: the operator's again
	check := func(when string) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			for id, ms := range want {
				c, err := tx.Conversation(ctx, id)
				if err != nil || c.RetentionMS != ms {
					t.Errorf("%s: Conversation(%s) = %+v, %v; want RetentionMS %d", when, id, c, err, ms)
				}
			}
			if c, _ := tx.Conversation(ctx, "c2"); c.ReadFrom != 1 || c.Mark != 3 {
				t.Errorf("%s: read-fanout fields beside a retention = %d, %d; want 1, 3", when, c.ReadFrom, c.Mark)
			}
			ms, err := tx.Memberships(ctx, "alice")
			if err != nil || len(ms) != 1 || ms[0].Conversation.RetentionMS != want["c1"] {
				t.Errorf("%s: Memberships = %+v, %v; want c1 with RetentionMS %d", when, ms, err, want["c1"])
			}
			return nil
		})
	}
	check("before a reopen")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = h.Open(t, Config{Dir: dir})
	check("after a reopen")
}
