package chat_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// memberRowCounter counts the member rows a store's transactions read.
type memberRowCounter struct {
	*updateCounter
	rows atomic.Int64
}

type rowCountingReadTx struct {
	store.ReadTx
	n *atomic.Int64
}

type rowCountingTx struct {
	store.Tx
	n *atomic.Int64
}

func (s *memberRowCounter) View(ctx context.Context, fn func(store.ReadTx) error) error {
	return s.updateCounter.View(ctx, func(tx store.ReadTx) error { return fn(rowCountingReadTx{tx, &s.rows}) })
}

func (s *memberRowCounter) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.updateCounter.Update(ctx, func(tx store.Tx) error { return fn(rowCountingTx{tx, &s.rows}) })
}

// rows counts the member rows a call returned.
func (t rowCountingReadTx) rows(ms []store.Member, err error) ([]store.Member, error) {
	t.n.Add(int64(len(ms)))
	return ms, err
}

func (t rowCountingReadTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	t.n.Add(1)
	return t.ReadTx.Member(ctx, convID, userID)
}

func (t rowCountingReadTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	return t.rows(t.ReadTx.Members(ctx, convID))
}

func (t rowCountingReadTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	return t.rows(t.ReadTx.MembersAfter(ctx, convID, after, limit))
}

func (t rowCountingTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	return rowCountingReadTx{t.Tx, t.n}.Member(ctx, convID, userID)
}

func (t rowCountingTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	return rowCountingReadTx{t.Tx, t.n}.Members(ctx, convID)
}

func (t rowCountingTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	return rowCountingReadTx{t.Tx, t.n}.MembersAfter(ctx, convID, after, limit)
}

// fill makes g's group n members and one owner, the members past the first ones written
// straight to the store: through chat, under -race, 20,000 users and their group take a
// minute to set up.
func (g *largeGroup) fill(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	if err := g.st.Update(ctx, func(tx store.Tx) error {
		c, err := tx.Conversation(ctx, g.conv)
		if err != nil {
			return err
		}
		for i := len(g.members); i < n; i++ {
			u := fmt.Sprintf("m%05d", i)
			g.members = append(g.members, u)
			if err := tx.CreateUser(ctx, store.User{ID: u, Name: u}); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: g.conv, UserID: u, Ordinal: int64(i + 2)}); err != nil {
				return err
			}
		}
		c.MembersCount = n + 1
		return tx.UpdateConversation(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestLargeGroupMemberChangesReadO1Rows: in a read-fanout group of 20,000 members, a join,
// a leave, the owner leaving (ownership passes to the longest-standing member), the read
// counts after them, and a page of the member list each read a handful of member rows,
// not the group's 20,000 (before part 5 of issue 9 each read them all).
func TestLargeGroupMemberChangesReadO1Rows(t *testing.T) {
	const n = 20000
	ctx := context.Background()
	g := newLargeGroup(t, 10)
	g.fill(t, n)
	cfg := g.cfg
	cfg.MaxGroupMembers = n + 10
	rc := &memberRowCounter{updateCounter: g.st}
	svc := chat.New(chat.Options{Store: rc, Config: cfg, Signer: g.signer})
	if _, _, err := svc.CreateUser(ctx, "newbie", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Receipts(ctx, me("alice"), g.conv, 1); err == nil {
		t.Fatal("receipts of a message not sent yet answered")
	}
	if _, err := svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: g.conv, ClientMsgID: "first", ContentType: 1, Content: []byte(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Receipts(ctx, me("alice"), g.conv, 1); err != nil { // counts the members once, into memory
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		maxRows int64
		do      func() error
	}{
		{"a join", 4, func() error {
			b, err := svc.UpdateMembers(ctx, me("alice"), g.conv, protocol.MembersRequest{Add: []string{"newbie"}})
			if err == nil && b.MembersCount != n+2 {
				t.Errorf("members_count after a join = %d, want %d", b.MembersCount, n+2)
			}
			return err
		}},
		{"a leave", 4, func() error {
			_, err := svc.UpdateMembers(ctx, me(g.members[7]), g.conv, protocol.MembersRequest{Remove: []string{g.members[7]}})
			return err
		}},
		{"the owner leaving", 5, func() error {
			_, err := svc.UpdateMembers(ctx, me("alice"), g.conv, protocol.MembersRequest{Remove: []string{"alice"}})
			return err
		}},
		{"read counts after the changes", 2, func() error {
			r, err := svc.Receipts(ctx, me("newbie"), g.conv, 1)
			if err == nil {
				t.Errorf("newbie, who joined after seq 1, got its receipts: %+v", r)
			}
			r, err = svc.Receipts(ctx, me(g.members[0]), g.conv, 1)
			if err == nil && r.MemberCount != n { // 20,000 - 1 left + 1 joined, without alice, the sender, who left
				t.Errorf("member_count = %d, want %d", r.MemberCount, n)
			}
			return err
		}},
		{"a page of 100 members", 102, func() error {
			p, err := svc.ListMembers(ctx, me(g.members[0]), g.conv, chat.PageQuery{Limit: 100})
			if err == nil && (len(p.Members) != 100 || p.Members[0].UserID != g.members[0] || p.Members[0].Role != protocol.RoleOwner || !p.HasMore) {
				t.Errorf("first page: %d members, first %+v, has_more %v; want 100 from %s, the new owner", len(p.Members), p.Members[0], p.HasMore, g.members[0])
			}
			return err
		}},
	}
	for _, st := range steps {
		before := rc.rows.Load()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		rows := rc.rows.Load() - before
		t.Logf("%s: %d member rows read", st.name, rows)
		if rows > st.maxRows {
			t.Errorf("%s read %d member rows of a %d-member group, want at most %d", st.name, rows, n, st.maxRows)
		}
	}
}
