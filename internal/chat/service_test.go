package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlite"
	"github.com/parleychat/parley/protocol"
)

// clock is a settable time source for tests of time windows.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type env struct {
	svc   *chat.Service
	clock *clock
	store *sqlite.Store
}

// newEnv returns a service on a fresh embedded store, with users alice, bob and carol.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, chat.DefaultConfig())
}

// newEnvWith is newEnv with the configuration cfg.
func newEnvWith(t *testing.T, cfg chat.Config) *env {
	t.Helper()
	st := openStore(t)
	clk := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	svc := chat.New(chat.Options{
		Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
		Config: cfg, Now: clk.Now,
	})
	e := &env{svc: svc, clock: clk, store: st}
	for _, u := range []string{"alice", "bob", "carol"} {
		e.user(t, u)
	}
	return e
}

// openStore opens a fresh embedded store, closed at the test's end.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func (e *env) user(t *testing.T, id string) chat.Identity {
	t.Helper()
	if _, _, err := e.svc.CreateUser(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	return chat.Identity{UserID: id, DeviceID: "phone"}
}

func me(u string) chat.Identity { return chat.Identity{UserID: u, DeviceID: "phone"} }

func (e *env) direct(t *testing.T, a, b string) string {
	t.Helper()
	c, err := e.svc.CreateConversation(context.Background(), me(a), protocol.CreateConversationRequest{Type: "direct", PeerID: b})
	if err != nil {
		t.Fatal(err)
	}
	return c.ConvID
}

var idSeq atomic.Int64

func (e *env) send(t *testing.T, from, conv string) protocol.MessageAck {
	t.Helper()
	ack, err := e.svc.Send(context.Background(), me(from), protocol.SendRequest{
		ConvID: conv, ClientMsgID: fmt.Sprintf("c%d", idSeq.Add(1)), ContentType: 1, Content: json.RawMessage(`"hi"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func (e *env) allEvents(t *testing.T, user string) []protocol.SyncEvent {
	t.Helper()
	resp, err := e.svc.Sync(context.Background(), me(user), 0, 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Events
}

func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

func TestSendDedupReturnsOriginalAck(t *testing.T) {
	e := newEnv(t)
	conv := e.direct(t, "alice", "bob")
	req := protocol.SendRequest{ConvID: conv, ClientMsgID: "m1", ContentType: 1, Content: json.RawMessage(`{"text":"a"}`)}
	first, err := e.svc.Send(context.Background(), me("alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	req.Content = json.RawMessage(`"different"`)
	again, err := e.svc.Send(context.Background(), me("alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || first.Duplicate || again.Seq != first.Seq || again.MsgID != first.MsgID || again.CreatedAt != first.CreatedAt {
		t.Fatalf("retry ack %+v, original %+v", again, first)
	}
	// Another sender may use the same client_msg_id.
	req.ClientMsgID = "m1"
	other, err := e.svc.Send(context.Background(), me("bob"), req)
	if err != nil || other.Duplicate || other.Seq != 2 {
		t.Fatalf("bob's m1: %+v %v", other, err)
	}
	page, err := e.svc.History(context.Background(), me("bob"), conv, chat.HistoryQuery{})
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("history %+v %v", page, err)
	}
}

func TestConcurrentSendsGaplessSeqAndCursors(t *testing.T) {
	e := newEnv(t)
	conv := e.direct(t, "alice", "bob")
	const workers, each = 8, 40
	var wg sync.WaitGroup
	acks := make(chan protocol.MessageAck, workers*each*2)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			from := []string{"alice", "bob"}[w%2]
			for i := 0; i < each; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				req := protocol.SendRequest{ConvID: conv, ClientMsgID: id, ContentType: 1, Content: json.RawMessage(`1`)}
				for r := 0; r < 2; r++ { // every message sent twice: the retry must dedup
					ack, err := e.svc.Send(context.Background(), me(from), req)
					if err != nil {
						t.Error(err)
						return
					}
					acks <- ack
				}
			}
		}(w)
	}
	wg.Wait()
	close(acks)
	seqs := map[int64]string{}
	for a := range acks {
		if prev, ok := seqs[a.Seq]; ok && prev != a.MsgID {
			t.Fatalf("seq %d given to two messages", a.Seq)
		}
		seqs[a.Seq] = a.MsgID
	}
	if len(seqs) != workers*each {
		t.Fatalf("%d distinct seqs, want %d", len(seqs), workers*each)
	}
	for s := int64(1); s <= workers*each; s++ {
		if _, ok := seqs[s]; !ok {
			t.Fatalf("seq %d missing", s)
		}
	}
	for _, u := range []string{"alice", "bob"} {
		evs := e.allEvents(t, u)
		var msgs int
		for i, ev := range evs {
			if ev.Cursor != int64(i+1) {
				t.Fatalf("%s cursor %d at index %d", u, ev.Cursor, i)
			}
			if ev.Type == protocol.EventMessage {
				msgs++
			}
		}
		if msgs != workers*each {
			t.Fatalf("%s has %d message events, want %d", u, msgs, workers*each)
		}
	}
}

// TestReadPositionNeverMovesBackwards is the design's concurrency simulation: 10 goroutines
// x 1000 read updates with random seqs from several devices.
// TestStartSendKeepsStartOrder: sends started one after another without waiting are
// stored in start order (seqs, and the cursors pushed to a member), an invalid one is
// refused by StartSend itself, a repeat in the same burst gets the original ack, and each
// Wait publishes its own events.
func TestStartSendKeepsStartOrder(t *testing.T) {
	e := newEnv(t)
	conv := e.direct(t, "alice", "bob")
	sub := e.svc.Hub().Subscribe("bob", 64)
	defer sub.Close()
	ctx := context.Background()
	req := func(id string) protocol.SendRequest {
		return protocol.SendRequest{ConvID: conv, ClientMsgID: id, ContentType: 1, Content: json.RawMessage(`"hi"`)}
	}
	if _, err := e.svc.StartSend(ctx, me("alice"), protocol.SendRequest{ConvID: conv, ClientMsgID: "bad", ContentType: 1}); !errors.Is(err, chat.ErrInvalid) {
		t.Fatalf("StartSend without content = %v, want ErrInvalid", err)
	}
	ids := []string{"s0", "s1", "s2", "s0", "s3"}
	pending := make([]chat.PendingSend, len(ids))
	for i, id := range ids {
		p, err := e.svc.StartSend(ctx, me("alice"), req(id))
		if err != nil {
			t.Fatal(err)
		}
		pending[i] = p
	}
	var acks []protocol.MessageAck
	for _, p := range pending {
		ack, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	for i, want := range []int64{1, 2, 3, 1, 4} {
		if acks[i].Seq != want || acks[i].ClientMsgID != ids[i] || acks[i].Duplicate != (i == 3) {
			t.Fatalf("ack %d = %+v, want seq %d of %s", i, acks[i], want, ids[i])
		}
	}
	if acks[3].MsgID != acks[0].MsgID {
		t.Fatalf("the repeat's ack %+v, want the original %+v", acks[3], acks[0])
	}
	for want := int64(2); want <= 5; want++ { // bob's log: conv_updated, then the four messages
		select {
		case ev := <-sub.Events():
			if ev.Cursor != want {
				t.Fatalf("bob's push has cursor %d, want %d", ev.Cursor, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no push of cursor %d", want)
		}
	}
}

func TestReadPositionNeverMovesBackwards(t *testing.T) {
	e := newEnv(t)
	conv := e.direct(t, "alice", "bob")
	const maxSeq = 300
	for i := 0; i < maxSeq; i++ {
		e.send(t, "alice", conv)
	}
	const workers, each = 10, 1000
	var wg sync.WaitGroup
	var maxWritten atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			dev := chat.Identity{UserID: "bob", DeviceID: fmt.Sprintf("dev%d", w%3)}
			seed := uint64(w*7919 + 1)
			var seen int64
			for i := 0; i < each; i++ {
				seed = seed*6364136223846793005 + 1442695040888963407
				// A rising position with noise: stale, repeated and fresh updates race, and
				// some ask beyond max_seq (clamped).
				seq := max(0, int64(i)*(maxSeq+20)/each+int64(seed>>33)%41-20)
				for old := maxWritten.Load(); min(seq, maxSeq) > old && !maxWritten.CompareAndSwap(old, min(seq, maxSeq)); old = maxWritten.Load() {
				}
				got, err := e.svc.MarkRead(context.Background(), dev, conv, seq)
				if err != nil {
					t.Error(err)
					return
				}
				if got < seen || got < min(seq, maxSeq) {
					t.Errorf("read position %d after %d (asked %d)", got, seen, seq)
					return
				}
				seen = got
			}
		}(w)
	}
	wg.Wait()
	b, err := e.svc.GetConversation(context.Background(), me("bob"), conv)
	if err != nil {
		t.Fatal(err)
	}
	if b.ReadSeq != maxWritten.Load() || b.DeliveredSeq < b.ReadSeq || b.Unread != maxSeq-b.ReadSeq {
		t.Fatalf("final %+v, max written %d", b, maxWritten.Load())
	}
	// The read events bob and alice got are strictly increasing.
	for _, u := range []string{"alice", "bob"} {
		var last int64
		for _, ev := range e.allEvents(t, u) {
			if ev.Type != protocol.EventRead {
				continue
			}
			var d protocol.ReadData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.UserID == "bob" {
				if d.ReadSeq <= last {
					t.Fatalf("%s saw read %d after %d", u, d.ReadSeq, last)
				}
				last = d.ReadSeq
			}
		}
		if last != b.ReadSeq {
			t.Fatalf("%s's last read event %d, position %d", u, last, b.ReadSeq)
		}
	}
}

func TestPositionsRules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	for i := 0; i < 5; i++ {
		e.send(t, "alice", conv)
	}
	if _, err := e.svc.MarkRead(ctx, me("bob"), conv, -1); !errors.Is(err, chat.ErrInvalid) {
		t.Fatalf("negative seq: %v", err)
	}
	if got, _ := e.svc.MarkRead(ctx, me("bob"), conv, 0); got != 0 {
		t.Fatalf("read 0 -> %d", got)
	}
	if got, _ := e.svc.MarkDelivered(ctx, me("bob"), conv, 4); got != 4 {
		t.Fatalf("delivered 4 -> %d", got)
	}
	if got, _ := e.svc.MarkRead(ctx, me("bob"), conv, 99); got != 5 {
		t.Fatalf("read 99 -> %d, want clamp to 5", got)
	}
	if got, _ := e.svc.MarkRead(ctx, me("bob"), conv, 2); got != 5 {
		t.Fatalf("stale read -> %d", got)
	}
	b, _ := e.svc.GetConversation(ctx, me("bob"), conv)
	if b.DeliveredSeq != 5 || b.Unread != 0 {
		t.Fatalf("read did not raise delivered: %+v", b)
	}
	a, _ := e.svc.GetConversation(ctx, me("alice"), conv)
	if *a.PeerReadSeq != 5 || *a.PeerDeliveredSeq != 5 || a.ReadSeq != 5 {
		t.Fatalf("alice's view %+v", a)
	}
	// alice got one delivered and one read event for bob, nothing for the no-ops.
	var types []string
	for _, ev := range e.allEvents(t, "alice") {
		if ev.Type == protocol.EventRead || ev.Type == protocol.EventDelivered {
			types = append(types, ev.Type)
		}
	}
	if fmt.Sprint(types) != "[delivered read]" {
		t.Fatalf("alice's position events %v", types)
	}
	if _, err := e.svc.MarkRead(ctx, me("carol"), conv, 1); !errors.Is(err, chat.ErrNotFound) {
		t.Fatalf("non-member read: %v", err)
	}
}

func TestDeleteConversationClearsAndReappears(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	e.send(t, "alice", conv)
	e.send(t, "alice", conv)
	if err := e.svc.DeleteConversation(ctx, me("bob"), conv); err != nil {
		t.Fatal(err)
	}
	list, _ := e.svc.ListConversations(ctx, me("bob"), chat.PageQuery{})
	if len(list.Conversations) != 0 {
		t.Fatalf("deleted conversation still listed: %+v", list)
	}
	b, err := e.svc.GetConversation(ctx, me("bob"), conv)
	if err != nil || b.ClearedSeq != 2 || b.Unread != 0 || b.LastMessage != nil {
		t.Fatalf("after delete %+v %v", b, err)
	}
	page, _ := e.svc.History(ctx, me("bob"), conv, chat.HistoryQuery{})
	if len(page.Messages) != 0 {
		t.Fatalf("cleared history returned %d", len(page.Messages))
	}
	e.send(t, "alice", conv)
	list, _ = e.svc.ListConversations(ctx, me("bob"), chat.PageQuery{})
	if l := list.Conversations; len(l) != 1 || l[0].Unread != 1 || l[0].LastMessage.Seq != 3 {
		t.Fatalf("after new message %+v", list)
	}
	page, _ = e.svc.History(ctx, me("bob"), conv, chat.HistoryQuery{})
	if len(page.Messages) != 1 || page.Messages[0].Seq != 3 {
		t.Fatalf("history after clear %+v", page)
	}
	// alice's history is untouched.
	page, _ = e.svc.History(ctx, me("alice"), conv, chat.HistoryQuery{})
	if len(page.Messages) != 3 {
		t.Fatalf("alice history %d", len(page.Messages))
	}
}

func TestHistoryPaging(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	for i := 0; i < 7; i++ {
		e.send(t, "alice", conv)
	}
	seqs := func(p protocol.MessagesPage) string {
		var s []int64
		for _, m := range p.Messages {
			s = append(s, m.Seq)
		}
		return fmt.Sprint(s, p.HasMore)
	}
	for _, tc := range []struct {
		q    chat.HistoryQuery
		want string
	}{
		{chat.HistoryQuery{Limit: 3}, "[1 2 3] true"},
		{chat.HistoryQuery{AfterSeq: 5}, "[6 7] false"},
		{chat.HistoryQuery{BeforeSeq: 6, Limit: 2}, "[4 5] true"},
		{chat.HistoryQuery{BeforeSeq: 3, Limit: 2}, "[1 2] false"},
		{chat.HistoryQuery{BeforeSeq: 100, Limit: 3}, "[5 6 7] true"},
	} {
		p, err := e.svc.History(ctx, me("bob"), conv, tc.q)
		if err != nil || seqs(p) != tc.want {
			t.Errorf("%+v: %s %v, want %s", tc.q, seqs(p), err, tc.want)
		}
	}
}

func TestGroupMembership(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.user(t, "dave")
	g, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "g", Members: []string{"bob", "bob", "carol"}})
	if err != nil || g.MembersCount != 3 || g.OwnerID != "alice" || g.Fanout != "write" {
		t.Fatalf("create %+v %v", g, err)
	}
	e.send(t, "alice", g.ConvID)
	e.send(t, "bob", g.ConvID)
	// Only the owner adds.
	_, err = e.svc.UpdateMembers(ctx, me("bob"), g.ConvID, protocol.MembersRequest{Add: []string{"dave"}})
	wantErr(t, err, chat.ErrForbidden)
	_, err = e.svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Add: []string{"nobody"}})
	wantErr(t, err, chat.ErrNotFound)
	g2, err := e.svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Add: []string{"dave"}})
	if err != nil || g2.MembersCount != 4 {
		t.Fatalf("add %+v %v", g2, err)
	}
	// dave joined at seq 2: sees only what follows.
	e.send(t, "carol", g.ConvID)
	d, _ := e.svc.GetConversation(ctx, me("dave"), g.ConvID)
	if d.Unread != 1 {
		t.Fatalf("dave unread %d, want 1", d.Unread)
	}
	page, _ := e.svc.History(ctx, me("dave"), g.ConvID, chat.HistoryQuery{})
	if len(page.Messages) != 1 || page.Messages[0].Seq != 3 {
		t.Fatalf("dave history %+v", page)
	}
	// The owner leaves: bob (longest-standing) becomes owner.
	g3, err := e.svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Remove: []string{"alice"}})
	if err != nil || g3.OwnerID != "bob" || g3.MembersCount != 3 {
		t.Fatalf("owner leaves %+v %v", g3, err)
	}
	_, err = e.svc.GetConversation(ctx, me("alice"), g.ConvID)
	wantErr(t, err, chat.ErrNotFound)
	_, err = e.svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: g.ConvID, ClientMsgID: "x", ContentType: 1, Content: json.RawMessage(`1`)})
	wantErr(t, err, chat.ErrNotFound)
	// alice got a conv_updated as a removed member.
	evs := e.allEvents(t, "alice")
	last := evs[len(evs)-1]
	if last.Type != protocol.EventConvUpdated {
		t.Fatalf("alice's last event %s", last.Type)
	}
	// A member leaves by themselves.
	if _, err := e.svc.UpdateMembers(ctx, me("carol"), g.ConvID, protocol.MembersRequest{Remove: []string{"carol"}}); err != nil {
		t.Fatal(err)
	}
	r, err := e.svc.Receipts(ctx, me("bob"), g.ConvID, 1)
	if err != nil || r.MemberCount != 2 || r.Readers != nil {
		t.Fatalf("receipts %+v %v", r, err)
	}
}

func TestReceipts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g, _ := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "g", Members: []string{"bob", "carol"}, ReadDetail: true})
	e.send(t, "alice", g.ConvID)
	e.send(t, "alice", g.ConvID)
	if _, err := e.svc.MarkRead(ctx, me("bob"), g.ConvID, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.MarkDelivered(ctx, me("carol"), g.ConvID, 1); err != nil {
		t.Fatal(err)
	}
	r, err := e.svc.Receipts(ctx, me("carol"), g.ConvID, 1)
	if err != nil || r.MemberCount != 2 || r.ReadCount != 1 || r.DeliveredCount != 2 || fmt.Sprint(*r.Readers) != "[bob]" {
		t.Fatalf("receipts %+v %v", r, err)
	}
	for _, seq := range []int64{0, 3} {
		_, err = e.svc.Receipts(ctx, me("carol"), g.ConvID, seq)
		wantErr(t, err, chat.ErrNotFound)
	}
}

func TestRecall(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	ack := e.send(t, "alice", conv)
	wantErr(t, e.svc.Recall(ctx, me("bob"), conv, ack.Seq), chat.ErrForbidden)
	wantErr(t, e.svc.Recall(ctx, me("alice"), conv, 9), chat.ErrNotFound)
	if err := e.svc.Recall(ctx, me("alice"), conv, ack.Seq); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Recall(ctx, me("alice"), conv, ack.Seq); err != nil {
		t.Fatalf("second recall: %v", err)
	}
	page, _ := e.svc.History(ctx, me("bob"), conv, chat.HistoryQuery{})
	m := page.Messages[0]
	if !m.Recalled || m.Content != nil || m.Extra != nil || m.MsgID != ack.MsgID || m.SenderID != "alice" {
		t.Fatalf("recalled message %+v", m)
	}
	// The sync "message" event now shows the recall too, and exactly one recall event exists.
	var recalls int
	for _, ev := range e.allEvents(t, "bob") {
		if ev.Type == protocol.EventRecall {
			recalls++
		}
		if ev.Type == protocol.EventMessage && string(ev.Data) != "" {
			var mm protocol.Message
			json.Unmarshal(ev.Data, &mm)
			if !mm.Recalled {
				t.Fatalf("message event still has content: %s", ev.Data)
			}
		}
	}
	if recalls != 1 {
		t.Fatalf("%d recall events", recalls)
	}
	late := e.send(t, "alice", conv)
	e.clock.Advance(25 * time.Hour)
	wantErr(t, e.svc.Recall(ctx, me("alice"), conv, late.Seq), chat.ErrForbidden)
}

func TestSyncLongPollWokenByCommit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	cur, err := e.svc.LatestCursor(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan protocol.SyncResponse, 1)
	go func() {
		resp, err := e.svc.Sync(ctx, me("bob"), cur, 0, 10, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	e.send(t, "alice", conv)
	select {
	case resp := <-got:
		if len(resp.Events) != 1 || resp.Events[0].Cursor != cur+1 || resp.Cursor != cur+1 {
			t.Fatalf("long-poll answer %+v", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by the commit")
	}
	_, err = e.svc.Sync(ctx, me("bob"), cur+5, 0, 10, 0)
	wantErr(t, err, chat.ErrConflict)
	// A cancelled wait returns the empty response.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	resp, err := e.svc.Sync(cctx, me("bob"), cur+1, 0, 10, 5*time.Second)
	if err != nil || len(resp.Events) != 0 || resp.Cursor != cur+1 {
		t.Fatalf("cancelled wait %+v %v", resp, err)
	}
}

func TestSyncPagingAndRetention(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	for i := 0; i < 5; i++ {
		e.send(t, "alice", conv)
	}
	resp, err := e.svc.Sync(ctx, me("bob"), 0, 0, 2, 0)
	if err != nil || len(resp.Events) != 2 || !resp.HasMore || resp.Cursor != 2 {
		t.Fatalf("page %+v %v", resp, err)
	}
	e.clock.Advance(31 * 24 * time.Hour)
	e.send(t, "alice", conv) // a fresh event that survives
	if err := e.svc.PruneOnce(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Sync(ctx, me("bob"), 2, 0, 10, 0)
	wantErr(t, err, chat.ErrGone)
	snap, err := e.svc.Snapshot(ctx, me("bob"), 0, chat.PageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = e.svc.Sync(ctx, me("bob"), snap.Cursor-1, 0, 10, 0)
	if err != nil || len(resp.Events) != 1 || resp.Events[0].Type != protocol.EventMessage {
		t.Fatalf("after prune %+v %v", resp, err)
	}
}

func TestSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	for i := 0; i < 4; i++ {
		e.send(t, "alice", conv)
	}
	e.svc.MarkRead(ctx, me("bob"), conv, 3)
	snap, err := e.svc.Snapshot(ctx, me("bob"), 2, chat.PageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := e.svc.LatestCursor(ctx, "bob")
	if snap.Cursor != last || len(snap.Conversations) != 1 || len(snap.Messages[conv]) != 2 || snap.Messages[conv][0].Seq != 3 {
		t.Fatalf("snapshot %+v", snap)
	}
	if snap.ReadPositions[conv]["bob"] != 3 || snap.ReadPositions[conv]["alice"] != 4 {
		t.Fatalf("read positions %+v", snap.ReadPositions)
	}
}

func TestDirectCreationIsIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.direct(t, "alice", "bob")
	b := e.direct(t, "bob", "alice")
	if a != b {
		t.Fatalf("two direct conversations %s %s", a, b)
	}
	_, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "direct", PeerID: "alice"})
	wantErr(t, err, chat.ErrInvalid)
	_, err = e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "direct", PeerID: "zed"})
	wantErr(t, err, chat.ErrNotFound)
	var updates int
	for _, ev := range e.allEvents(t, "bob") {
		if ev.Type == protocol.EventConvUpdated {
			updates++
		}
	}
	if updates != 1 {
		t.Fatalf("bob got %d conv_updated, want 1 (first creation only)", updates)
	}
}

func TestTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok, err := e.svc.IssueToken(ctx, "alice", "laptop", 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.svc.Authenticate(ctx, tok.Token)
	if err != nil || id.UserID != "alice" || id.DeviceID != "laptop" {
		t.Fatalf("authenticate %+v %v", id, err)
	}
	_, err = e.svc.IssueToken(ctx, "zed", "x", 0)
	wantErr(t, err, chat.ErrNotFound)
	sub := e.svc.Hub().Subscribe("alice", 1)
	if err := e.svc.RevokeTokens(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
	default:
		t.Fatal("revocation did not end alice's subscriptions")
	}
	_, err = e.svc.Authenticate(ctx, tok.Token)
	wantErr(t, err, chat.ErrUnauthorized)
	fresh, _ := e.svc.IssueToken(ctx, "alice", "laptop", 0)
	if _, err := e.svc.Authenticate(ctx, fresh.Token); err != nil {
		t.Fatalf("token minted after revoke: %v", err)
	}
	short, _ := e.svc.IssueToken(ctx, "alice", "laptop", time.Minute)
	e.clock.Advance(2 * time.Minute)
	_, err = e.svc.Authenticate(ctx, short.Token)
	wantErr(t, err, chat.ErrUnauthorized)
	_, err = e.svc.Authenticate(ctx, fresh.Token[:len(fresh.Token)-2]+"xx")
	wantErr(t, err, chat.ErrUnauthorized)
}

func TestSendValidation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	big := json.RawMessage(`"` + string(make([]byte, 0)) + fmt.Sprintf("%065537d", 0) + `"`)
	for name, tc := range map[string]struct {
		req  protocol.SendRequest
		want error
	}{
		"bad conv":        {protocol.SendRequest{ConvID: "a/b", ClientMsgID: "x", ContentType: 1, Content: json.RawMessage(`1`)}, chat.ErrInvalid},
		"unknown conv":    {protocol.SendRequest{ConvID: "d_nope", ClientMsgID: "x", ContentType: 1, Content: json.RawMessage(`1`)}, chat.ErrNotFound},
		"bad client id":   {protocol.SendRequest{ConvID: conv, ClientMsgID: "a b", ContentType: 1, Content: json.RawMessage(`1`)}, chat.ErrInvalid},
		"content type 0":  {protocol.SendRequest{ConvID: conv, ClientMsgID: "x", Content: json.RawMessage(`1`)}, chat.ErrInvalid},
		"missing content": {protocol.SendRequest{ConvID: conv, ClientMsgID: "x", ContentType: 1}, chat.ErrInvalid},
		"too large":       {protocol.SendRequest{ConvID: conv, ClientMsgID: "x", ContentType: 1, Content: big}, chat.ErrTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Send(ctx, me("alice"), tc.req)
			wantErr(t, err, tc.want)
		})
	}
	_, err := e.svc.Send(ctx, me("carol"), protocol.SendRequest{ConvID: conv, ClientMsgID: "x", ContentType: 1, Content: json.RawMessage(`1`)})
	wantErr(t, err, chat.ErrNotFound)
}

func TestHealthFollowsTheStore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conv := e.direct(t, "alice", "bob")
	if err := e.svc.Healthy(ctx); err != nil {
		t.Fatalf("healthy store: %v", err)
	}
	e.store.Close() // from now on every write fails as the store's would on a dead disk
	_, err := e.svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: conv, ClientMsgID: "x", ContentType: 1, Content: json.RawMessage(`1`)})
	wantErr(t, err, chat.ErrUnavailable)
	wantErr(t, e.svc.Healthy(ctx), chat.ErrUnavailable)
}

// fullDisk stands for a store whose disk fills and frees on demand: while writes is set
// every write transaction fails as SQLite's does on a full disk; while full is set the
// service's Room check reports no room.
type fullDisk struct {
	store.Store
	writes, full atomic.Bool
}

func (d *fullDisk) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	if d.writes.Load() {
		return errors.New("database or disk is full")
	}
	return d.Store.Update(ctx, fn)
}

func (d *fullDisk) StartAppend(ctx context.Context, m store.Message) (store.PendingAppend, error) {
	if d.writes.Load() {
		return nil, errors.New("database or disk is full")
	}
	return d.Store.StartAppend(ctx, m)
}

func (d *fullDisk) room() error {
	if d.full.Load() {
		return errors.New("12 KiB free")
	}
	return nil
}

// TestHealthReportsWriteFailureUntilRoom: after a write failed, one small write that fits
// on a still full disk does not turn the health green; a write once the disk has room does.
func TestHealthReportsWriteFailureUntilRoom(t *testing.T) {
	ctx := context.Background()
	disk := &fullDisk{Store: openStore(t)}
	svc := chat.New(chat.Options{Store: disk, Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
		Config: chat.DefaultConfig(), Room: disk.room})
	for _, u := range []string{"alice", "bob"} {
		if _, _, err := svc.CreateUser(ctx, u, ""); err != nil {
			t.Fatal(err)
		}
	}
	c, err := svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "direct", PeerID: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string) error {
		_, err := svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: c.ConvID, ClientMsgID: id, ContentType: 1, Content: json.RawMessage(`1`)})
		return err
	}
	steps := []struct {
		name          string
		writes, full  bool
		send, healthy error
	}{
		{"healthy", false, false, nil, nil},
		{"disk full", true, true, chat.ErrUnavailable, chat.ErrUnavailable},
		{"a small write fits, the disk is still full", false, true, nil, chat.ErrUnavailable},
		{"room again, a write succeeds", false, false, nil, nil},
	}
	for i, step := range steps {
		disk.writes.Store(step.writes)
		disk.full.Store(step.full)
		wantErr(t, send(fmt.Sprintf("m%d", i)), step.send)
		err := svc.Healthy(ctx)
		wantErr(t, err, step.healthy)
		if err != nil && !strings.Contains(err.Error(), "database or disk is full") {
			t.Errorf("%s: health %q does not report the last write error", step.name, err)
		}
	}
}

// TestSessions: a session re-checks cheaply what Authenticate checks, and says which of
// revocation and expiry ended it.
func TestSessions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok, err := e.svc.IssueToken(ctx, "alice", "laptop", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.svc.OpenSession(ctx, tok.Token)
	if err != nil || sess.Identity != (chat.Identity{UserID: "alice", DeviceID: "laptop"}) {
		t.Fatalf("OpenSession = %+v, %v", sess, err)
	}
	if left, err := e.svc.CheckSession(ctx, sess); err != nil || left != time.Hour {
		t.Fatalf("CheckSession = %v, %v; want 1h left", left, err)
	}
	e.clock.Advance(time.Hour)
	_, err = e.svc.CheckSession(ctx, sess)
	wantErr(t, err, chat.ErrUnauthorized)
	if !errors.Is(err, auth.ErrExpired) {
		t.Fatalf("expired session: %v, want auth.ErrExpired", err)
	}
	fresh, _ := e.svc.IssueToken(ctx, "alice", "laptop", 0)
	sess, _ = e.svc.OpenSession(ctx, fresh.Token)
	if err := e.svc.RevokeTokens(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.CheckSession(ctx, sess)
	wantErr(t, err, chat.ErrUnauthorized)
	if !errors.Is(err, auth.ErrRevoked) {
		t.Fatalf("revoked session: %v, want auth.ErrRevoked", err)
	}
}

// TestEventCount: a context from WithEventCount counts the events its calls committed.
func TestEventCount(t *testing.T) {
	e := newEnv(t)
	ctx := chat.WithEventCount(context.Background())
	conv := e.direct(t, "alice", "bob")
	if _, err := e.svc.Send(ctx, me("alice"), protocol.SendRequest{ConvID: conv, ClientMsgID: "c1", ContentType: 1, Content: json.RawMessage(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	g, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: protocol.TypeGroup, Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Rename(ctx, me("alice"), g.ConvID, g.Name); err != nil { // no change, no event
		t.Fatal(err)
	}
	if got := chat.EventsCounted(ctx); got != 2+3 {
		t.Fatalf("EventsCounted = %d, want 5 (a direct send, a group of 3 created)", got)
	}
	if got := chat.EventsCounted(context.Background()); got != 0 {
		t.Fatalf("EventsCounted of a plain context = %d", got)
	}
}

// BenchmarkCheckSession measures the check a WebSocket runs before every frame.
func BenchmarkCheckSession(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: b.TempDir(), Relaxed: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	svc := chat.New(chat.Options{Store: st, Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")), Config: chat.DefaultConfig()})
	if _, _, err := svc.CreateUser(ctx, "alice", ""); err != nil {
		b.Fatal(err)
	}
	tok, _ := svc.IssueToken(ctx, "alice", "phone", 0)
	sess, err := svc.OpenSession(ctx, tok.Token)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := svc.CheckSession(ctx, sess); err != nil {
			b.Fatal(err)
		}
	}
}
