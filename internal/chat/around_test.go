package chat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// aroundPage renders a jump's answer as "seqs anchor before after more", for tables.
func aroundPage(p protocol.MessagesPage) string {
	var s []int64
	for _, m := range p.Messages {
		s = append(s, m.Seq)
	}
	return fmt.Sprintf("%v a%d b%t f%t m%t", s, p.AnchorSeq, p.HasMoreBefore, p.HasMoreAfter, p.HasMore)
}

// TestHistoryAround jumps to times before, between, exactly at and after the messages of a
// conversation (one a minute), with small limits so that both sides and the filling from
// the other side show.
func TestHistoryAround(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	var at []int64 // at[i] is the created_at of seq i+1
	for range 7 {
		e.clock.Advance(time.Minute)
		at = append(at, e.clock.Now().UnixMilli())
		e.send(t, "alice", conv)
	}
	for _, tc := range []struct {
		name  string
		ts    int64
		limit int
		want  string
	}{
		{"before all", at[0] - 1, 4, "[1 2 3 4] a1 bfalse ftrue mtrue"},
		{"exactly at the first", at[0], 3, "[1 2 3] a1 bfalse ftrue mtrue"},
		{"between 3 and 4", at[2] + 1, 4, "[2 3 4 5] a4 btrue ftrue mtrue"},
		{"exactly at 4", at[3], 4, "[2 3 4 5] a4 btrue ftrue mtrue"},
		{"odd limit: the anchor's side has the extra one", at[3], 3, "[3 4 5] a4 btrue ftrue mtrue"},
		{"limit 1 is the anchor", at[3], 1, "[4] a4 btrue ftrue mtrue"},
		{"near the end, the older side fills", at[6], 4, "[4 5 6 7] a7 btrue ffalse mtrue"},
		{"everything fits", at[3], 0, "[1 2 3 4 5 6 7] a4 bfalse ffalse mfalse"},
		{"after all: the newest, no anchor", at[6] + 1, 3, "[5 6 7] a0 btrue ffalse mtrue"},
	} {
		p, err := e.svc.History(ctx, me("bob"), conv, chat.HistoryQuery{AroundTS: tc.ts, Limit: tc.limit})
		if got := aroundPage(p); err != nil || got != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.name, got, err, tc.want)
		}
	}
	for _, q := range []chat.HistoryQuery{
		{AroundTS: at[0], AfterSeq: 1}, {AroundTS: at[0], BeforeSeq: 3}, {AroundTS: -1},
	} {
		_, err := e.svc.History(ctx, me("bob"), conv, q)
		wantErr(t, err, chat.ErrInvalid)
	}
	_, err := e.svc.History(ctx, me("carol"), conv, chat.HistoryQuery{AroundTS: at[0]})
	wantErr(t, err, chat.ErrNotFound)
	// A plain page leaves the jump's fields out of its encoding.
	p, err := e.svc.History(ctx, me("bob"), conv, chat.HistoryQuery{Limit: 2})
	if err != nil || p.AnchorSeq != 0 || p.HasMoreBefore || p.HasMoreAfter || !p.HasMore {
		t.Fatalf("plain page %+v %v", p, err)
	}
}

// TestHistoryAroundRespectsTheFloor: a member who joined late, or cleared, is never shown
// what is below their floor, and a jump to a time below it lands on their first visible
// message; a recalled message is in the page as history shows it.
func TestHistoryAroundRespectsTheFloor(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.user(t, "dave")
	g, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "g", Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	var at []int64
	send := func() {
		e.clock.Advance(time.Minute)
		at = append(at, e.clock.Now().UnixMilli())
		e.send(t, "alice", g.ConvID)
	}
	for range 3 {
		send()
	}
	if _, err := e.svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Add: []string{"dave"}}); err != nil {
		t.Fatal(err)
	}
	send()
	send()
	if err := e.svc.DeleteConversation(ctx, me("carol"), g.ConvID); err != nil { // carol's floor: 5
		t.Fatal(err)
	}
	send()
	send()
	if err := e.svc.Recall(ctx, me("alice"), g.ConvID, 6); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user string
		ts   int64
		want string
	}{
		{"dave", at[0], "[4 5 6 7] a4 bfalse ffalse mfalse"}, // below the floor: the first visible
		{"dave", at[4], "[4 5 6 7] a5 bfalse ffalse mfalse"},
		{"carol", at[1], "[6 7] a6 bfalse ffalse mfalse"},
		{"carol", at[6] + 1, "[6 7] a0 bfalse ffalse mfalse"},
		{"bob", at[1], "[1 2 3 4 5 6 7] a2 bfalse ffalse mfalse"},
	} {
		p, err := e.svc.History(ctx, me(tc.user), g.ConvID, chat.HistoryQuery{AroundTS: tc.ts})
		if got := aroundPage(p); err != nil || got != tc.want {
			t.Errorf("%s at %d: %s %v, want %s", tc.user, tc.ts, got, err, tc.want)
		}
		for _, m := range p.Messages {
			if m.Seq == 6 && (!m.Recalled || m.Content != nil) {
				t.Errorf("%s: recalled message shown as %+v", tc.user, m)
			}
		}
	}
	// Nothing visible at all: no anchor, an empty page.
	if err := e.svc.DeleteConversation(ctx, me("carol"), g.ConvID); err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.History(ctx, me("carol"), g.ConvID, chat.HistoryQuery{AroundTS: at[0]})
	if got := aroundPage(p); err != nil || got != "[] a0 bfalse ffalse mfalse" {
		t.Fatalf("cleared all: %s %v", got, err)
	}
}
