package storetest

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

func testUserCreateAndLookup(t *testing.T, s store.Store) {
	want := newUser("alice")
	createUsers(t, s, want.ID)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		got, err := tx.User(ctx, want.ID)
		if err != nil {
			t.Fatalf("User: %v", err)
		}
		if got != want {
			t.Errorf("User = %+v, want %+v", got, want)
		}
		return nil
	})
}

func testUserExists(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	other := newUser("alice")
	other.Name = "impostor"
	err := s.Update(t.Context(), func(tx store.Tx) error { return tx.CreateUser(t.Context(), other) })
	wantErr(t, "CreateUser of an existing id", err, store.ErrExists)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if got, err := tx.User(ctx, "alice"); err != nil || got.Name != newUser("alice").Name {
			t.Errorf("User after a failed duplicate = %+v, %v; want the original", got, err)
		}
		return nil
	})
}

func testUserNotFound(t *testing.T, s store.Store) {
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.User(ctx, "nobody")
		wantErr(t, "User in View", err, store.ErrNotFound)
		return nil
	})
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.User(ctx, "nobody")
		wantErr(t, "User in Update", err, store.ErrNotFound)
		return nil
	})
}

func testUserSetTokenGen(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "SetTokenGen of an unknown user", tx.SetTokenGen(ctx, "nobody", 2), store.ErrNotFound)
		return tx.SetTokenGen(ctx, "alice", 7)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if u, err := tx.User(ctx, "alice"); err != nil || u.TokenGen != 7 {
			t.Errorf("User = %+v, %v; want TokenGen 7", u, err)
		}
		return nil
	})
}

func testUserSetPresenceHidden(t *testing.T, s store.Store) {
	createUsers(t, s, "alice")
	for _, hidden := range []bool{true, false, true} {
		update(t, s, func(ctx context.Context, tx store.Tx) error {
			wantErr(t, "SetPresenceHidden of an unknown user", tx.SetPresenceHidden(ctx, "nobody", hidden), store.ErrNotFound)
			return tx.SetPresenceHidden(ctx, "alice", hidden)
		})
		view(t, s, func(ctx context.Context, tx store.ReadTx) error {
			if u, err := tx.User(ctx, "alice"); err != nil || u.PresenceHidden != hidden || u.Name == "" {
				t.Errorf("User = %+v, %v; want PresenceHidden %v and the rest kept", u, err, hidden)
			}
			return nil
		})
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.SetTokenGen(ctx, "alice", 3) })
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		if u, err := tx.User(ctx, "alice"); err != nil || !u.PresenceHidden || u.TokenGen != 3 {
			t.Errorf("after SetTokenGen, User = %+v, %v; want PresenceHidden kept", u, err)
		}
		return nil
	})
}

func testConversationCreateAndLookup(t *testing.T, s store.Store) {
	want := newConversation("c1")
	want.ReadDetail = true
	want.MaxSeq = 3
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.CreateConversation(ctx, want) })
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		got, err := tx.Conversation(ctx, "c1")
		if err != nil || got != want {
			t.Errorf("Conversation = %+v, %v; want %+v", got, err, want)
		}
		return nil
	})
}

func testConversationExistsAndNotFound(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.CreateConversation(ctx, newConversation("c1"))
	})
	err := s.Update(t.Context(), func(tx store.Tx) error {
		return tx.CreateConversation(t.Context(), newConversation("c1"))
	})
	wantErr(t, "CreateConversation of an existing id", err, store.ErrExists)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.Conversation(ctx, "c2")
		wantErr(t, "Conversation of an unknown id", err, store.ErrNotFound)
		return nil
	})
}

func testConversationUpdate(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.CreateConversation(ctx, newConversation("c1"))
	})
	want := store.Conversation{
		ID: "c1", Type: "direct", Name: "renamed", OwnerID: "bob", ReadDetail: true,
		MaxSeq: 42, MembersCount: 5, CreatedAt: 11, UpdatedAt: 12,
	}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		wantErr(t, "UpdateConversation of an unknown id",
			tx.UpdateConversation(ctx, store.Conversation{ID: "c2"}), store.ErrNotFound)
		return tx.UpdateConversation(ctx, want)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		got, err := tx.Conversation(ctx, "c1")
		if err != nil || got != want {
			t.Errorf("Conversation = %+v, %v; want every field overwritten: %+v", got, err, want)
		}
		_, err = tx.Conversation(ctx, "c2")
		wantErr(t, "Conversation after a failed UpdateConversation", err, store.ErrNotFound)
		return nil
	})
}

func testMemberPutAndLookup(t *testing.T, s store.Store) {
	m := store.Member{ConvID: "c1", UserID: "alice", JoinedAt: 5, Ordinal: 1, JoinSeq: 2}
	update(t, s, func(ctx context.Context, tx store.Tx) error { return tx.PutMember(ctx, m) })
	m2 := store.Member{ConvID: "c1", UserID: "alice", JoinedAt: 6, Ordinal: 9, JoinSeq: 3,
		ClearedSeq: 4, ReadSeq: 5, DeliveredSeq: 6, Hidden: true}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		got, err := tx.Member(ctx, "c1", "alice")
		if err != nil || got != m {
			t.Errorf("Member after insert = %+v, %v; want %+v", got, err, m)
		}
		return tx.PutMember(ctx, m2)
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		got, err := tx.Member(ctx, "c1", "alice")
		if err != nil || got != m2 {
			t.Errorf("Member after overwrite = %+v, %v; want %+v", got, err, m2)
		}
		_, err = tx.Member(ctx, "c1", "bob")
		wantErr(t, "Member of a non-member", err, store.ErrNotFound)
		return nil
	})
}

func testMembersOrdered(t *testing.T, s store.Store) {
	users := []string{"carol", "alice", "bob", "dave"}
	ordinals := []int64{3, 1, 2, 4}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for i, u := range users {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: ordinals[i]}); err != nil {
				return err
			}
		}
		return tx.PutMember(ctx, store.Member{ConvID: "other", UserID: "alice", Ordinal: 1})
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		ms, err := tx.Members(ctx, "c1")
		if err != nil {
			t.Fatalf("Members: %v", err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.UserID)
		}
		if want := []string{"alice", "bob", "carol", "dave"}; !slices.Equal(got, want) {
			t.Errorf("Members order = %v, want %v (by Ordinal)", got, want)
		}
		if ms, err := tx.Members(ctx, "none"); err != nil || len(ms) != 0 {
			t.Errorf("Members of an unknown conversation = %v, %v; want empty", ms, err)
		}
		return nil
	})
}

func testMemberships(t *testing.T, s store.Store) {
	c1, c2 := newConversation("c1"), newConversation("c2")
	m1 := store.Member{ConvID: "c1", UserID: "alice", Ordinal: 1, ReadSeq: 3}
	m2 := store.Member{ConvID: "c2", UserID: "alice", Ordinal: 2, Hidden: true}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for _, c := range []store.Conversation{c1, c2, newConversation("c3")} {
			if err := tx.CreateConversation(ctx, c); err != nil {
				return err
			}
		}
		for _, m := range []store.Member{m1, m2, {ConvID: "c3", UserID: "bob"}} {
			if err := tx.PutMember(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		got, err := tx.Memberships(ctx, "alice")
		if err != nil {
			t.Fatalf("Memberships: %v", err)
		}
		slices.SortFunc(got, func(a, b store.Membership) int { return strings.Compare(a.ConvID, b.ConvID) })
		want := []store.Membership{{Member: m1, Conversation: c1}, {Member: m2, Conversation: c2}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Memberships = %+v, want %+v (hidden included)", got, want)
		}
		if got, err := tx.Memberships(ctx, "carol"); err != nil || len(got) != 0 {
			t.Errorf("Memberships of a user in none = %v, %v; want empty", got, err)
		}
		return nil
	})
}

func testMemberDelete(t *testing.T, s store.Store) {
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		return tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice"})
	})
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeleteMember(ctx, "c1", "alice"); err != nil {
			t.Errorf("DeleteMember: %v", err)
		}
		wantErr(t, "DeleteMember twice", tx.DeleteMember(ctx, "c1", "alice"), store.ErrNotFound)
		return nil
	})
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		_, err := tx.Member(ctx, "c1", "alice")
		wantErr(t, "Member after DeleteMember", err, store.ErrNotFound)
		return nil
	})
}

// testMembersPaged: MembersAfter pages the members by standing and LastOrdinal gives the
// highest ordinal, both following joins, leaves, a changed ordinal and a failed Update,
// seeing the transaction's own writes, and never the members of another conversation
// (c10's id extends c1's).
func testMembersPaged(t *testing.T, s store.Store) {
	ordinals := map[string]int64{"carol": 3, "alice": 1, "bob": 2, "dave": 4, "erin": 5}
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		for u, o := range ordinals {
			if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: u, Ordinal: o, ReadSeq: o}); err != nil {
				return err
			}
		}
		return tx.PutMember(ctx, store.Member{ConvID: "c10", UserID: "zed", Ordinal: 9})
	})
	page := func(ctx context.Context, tx store.ReadTx, after int64, limit int) []string {
		t.Helper()
		ms, err := tx.MembersAfter(ctx, "c1", after, limit)
		if err != nil {
			t.Fatalf("MembersAfter(%d, %d): %v", after, limit, err)
		}
		var got []string
		for _, m := range ms {
			if m.ReadSeq != m.Ordinal || m.ConvID != "c1" {
				t.Errorf("MembersAfter: row %+v is not the one stored", m)
			}
			got = append(got, m.UserID)
		}
		return got
	}
	last := func(ctx context.Context, tx store.ReadTx, conv string) int64 {
		t.Helper()
		n, err := tx.LastOrdinal(ctx, conv)
		if err != nil {
			t.Fatalf("LastOrdinal(%s): %v", conv, err)
		}
		return n
	}
	check := func(ctx context.Context, tx store.ReadTx, what string, after int64, limit int, want []string) {
		t.Helper()
		if got := page(ctx, tx, after, limit); !slices.Equal(got, want) {
			t.Errorf("%s: MembersAfter(%d, %d) = %v, want %v", what, after, limit, got, want)
		}
	}
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		check(ctx, tx, "first page", 0, 2, []string{"alice", "bob"})
		check(ctx, tx, "second page", 2, 2, []string{"carol", "dave"})
		check(ctx, tx, "last page", 4, 2, []string{"erin"})
		check(ctx, tx, "past the end", 5, 2, nil)
		if n := last(ctx, tx, "c1"); n != 5 {
			t.Errorf("LastOrdinal = %d, want 5", n)
		}
		if n := last(ctx, tx, "none"); n != 0 {
			t.Errorf("LastOrdinal of an unknown conversation = %d, want 0", n)
		}
		if ms, err := tx.MembersAfter(ctx, "none", 0, 10); err != nil || len(ms) != 0 {
			t.Errorf("MembersAfter of an unknown conversation = %v, %v; want empty", ms, err)
		}
		return nil
	})
	update(t, s, func(ctx context.Context, tx store.Tx) error {
		if err := tx.DeleteMember(ctx, "c1", "erin"); err != nil {
			return err
		}
		if err := tx.DeleteMember(ctx, "c1", "bob"); err != nil {
			return err
		}
		if err := tx.PutMember(ctx, store.Member{ConvID: "c1", UserID: "alice", Ordinal: 6, ReadSeq: 6}); err != nil {
			return err
		}
		check(ctx, tx, "inside the Update that changed it", 0, 10, []string{"carol", "dave", "alice"})
		return nil
	})
	wantErr(t, "a failed Update", s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.PutMember(context.Background(), store.Member{ConvID: "c1", UserID: "fred", Ordinal: 7, ReadSeq: 7}); err != nil {
			return err
		}
		return errTest
	}), errTest)
	view(t, s, func(ctx context.Context, tx store.ReadTx) error {
		check(ctx, tx, "after leaves, a moved ordinal and a failed join", 0, 10, []string{"carol", "dave", "alice"})
		check(ctx, tx, "after leaves, from the middle", 3, 1, []string{"dave"})
		if n := last(ctx, tx, "c1"); n != 6 {
			t.Errorf("LastOrdinal after the changes = %d, want 6", n)
		}
		for _, u := range []string{"bob", "erin", "fred"} { // the other indexes went (or never came) with the row
			if ms, err := tx.Memberships(ctx, u); err != nil || len(ms) != 0 {
				t.Errorf("Memberships(%s) after leaving = %+v, %v; want none", u, ms, err)
			}
		}
		return nil
	})
}
