package chat_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// countingStore counts the message ranges read through Views.
type countingStore struct {
	store.Store
	ranges atomic.Int64
}

type countingTx struct {
	store.ReadTx
	n *atomic.Int64
}

func (t countingTx) Messages(ctx context.Context, convID string, r store.MessageRange) ([]store.Message, error) {
	t.n.Add(1)
	return t.ReadTx.Messages(ctx, convID, r)
}

func (s *countingStore) View(ctx context.Context, fn func(store.ReadTx) error) error {
	return s.Store.View(ctx, func(tx store.ReadTx) error { return fn(countingTx{tx, &s.ranges}) })
}

// TestHistoryOfLargeGroupsFromMemory: a read-fanout group's newest messages are answered
// from memory, page for page as the store answers them (after and before a seq, limits,
// a member who sees history only from when they joined, a recall), and a burst of pulls of
// the newest message reads no message from the store.
func TestHistoryOfLargeGroupsFromMemory(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cs := &countingStore{Store: st}
	cfg := chat.DefaultConfig()
	cfg.WriteFanoutMax = 2
	svc := chat.New(chat.Options{Store: cs, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")), Config: cfg})
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		if _, _, err := svc.CreateUser(ctx, u, ""); err != nil {
			t.Fatal(err)
		}
	}
	g, err := svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "big", Members: []string{"bob", "carol"}})
	if err != nil || g.Fanout != protocol.FanoutRead {
		t.Fatalf("group: %+v, %v; want read fanout", g, err)
	}
	send := func(n int) {
		for range n {
			if _, err := svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: g.ConvID, ClientMsgID: fmt.Sprint("m", idSeq.Add(1)),
				ContentType: 1, Content: []byte(`{"text":"hi"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(150)
	if _, err := svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Add: []string{"dave"}}); err != nil {
		t.Fatal(err)
	}
	send(100) // 250 in all; the newest 200 are held, dave sees from 151
	if err := svc.Recall(ctx, me("alice"), g.ConvID, 240); err != nil {
		t.Fatal(err)
	}
	send(5) // the recall dropped the window: it starts again at 251

	fromStore := func(user string, q chat.HistoryQuery) protocol.MessagesPage {
		t.Helper()
		var floor int64
		var ms []store.Message
		if err := st.View(ctx, func(tx store.ReadTx) error {
			m, err := tx.Member(ctx, g.ConvID, user)
			floor = max(m.JoinSeq, m.ClearedSeq)
			if err == nil {
				ms, err = tx.Messages(ctx, g.ConvID, store.MessageRange{Floor: floor, AfterSeq: q.AfterSeq, BeforeSeq: q.BeforeSeq, Limit: q.Limit + 1})
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		page := protocol.MessagesPage{HasMore: len(ms) > q.Limit}
		if page.HasMore && q.BeforeSeq > 0 {
			ms = ms[1:]
		} else if page.HasMore {
			ms = ms[:q.Limit]
		}
		for _, m := range ms {
			w := protocol.Message{ConvID: m.ConvID, Seq: m.Seq, MsgID: m.MsgID, ClientMsgID: m.ClientMsgID, SenderID: m.SenderID,
				ContentType: m.ContentType, CreatedAt: m.CreatedAt, Recalled: m.Recalled, Content: m.Content}
			if m.Extra != nil {
				w.Extra = map[string]string{}
			}
			page.Messages = append(page.Messages, w)
		}
		if page.Messages == nil {
			page.Messages = []protocol.Message{}
		}
		return page
	}
	queries := []chat.HistoryQuery{}
	for _, after := range []int64{0, 100, 150, 200, 239, 240, 250, 254, 255, 300} {
		for _, limit := range []int{1, 3, 50} {
			queries = append(queries, chat.HistoryQuery{AfterSeq: after, Limit: limit})
		}
	}
	for _, before := range []int64{1, 60, 152, 241, 251, 256, 400} {
		for _, limit := range []int{1, 3, 50} {
			queries = append(queries, chat.HistoryQuery{BeforeSeq: before, Limit: limit})
		}
	}
	for round := range 2 { // the first round fills the window from the store
		for _, user := range []string{"bob", "dave"} {
			for _, q := range queries {
				got, err := svc.History(ctx, me(user), g.ConvID, q)
				if err != nil {
					t.Fatal(err)
				}
				want := fromStore(user, q)
				for i := range min(len(got.Messages), len(want.Messages)) { // compare what the wire carries
					got.Messages[i].Extra = want.Messages[i].Extra
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("round %d, %s, %+v:\n got %s\nwant %s", round, user, q, pageSeqs(got), pageSeqs(want))
				}
			}
		}
	}
	before := cs.ranges.Load()
	for range 50 {
		if _, err := svc.History(ctx, me("bob"), g.ConvID, chat.HistoryQuery{AfterSeq: 254, Limit: 50}); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.ranges.Load() - before; n != 0 {
		t.Errorf("50 pulls of the newest message read %d message ranges from the store, want 0", n)
	}
}

func pageSeqs(p protocol.MessagesPage) string {
	s := fmt.Sprint("has_more=", p.HasMore, " seqs")
	for _, m := range p.Messages {
		s += fmt.Sprint(" ", m.Seq)
		if m.Recalled {
			s += "r"
		}
	}
	return s
}
