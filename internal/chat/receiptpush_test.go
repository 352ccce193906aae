package chat_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// timers is a fake chat.Options.AfterFunc: it keeps the functions until the test fires them.
type timers struct {
	mu  sync.Mutex
	fns []func()
}

func (t *timers) AfterFunc(_ time.Duration, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fns = append(t.fns, f)
}

// fire runs the functions scheduled so far and reports how many there were.
func (t *timers) fire() int {
	t.mu.Lock()
	fns := t.fns
	t.fns = nil
	t.mu.Unlock()
	for _, f := range fns {
		f()
	}
	return len(fns)
}

// nextReceipts waits up to 5 s for the next receipts push on sub, skipping log events.
func nextReceipts(t *testing.T, sub *hub.Subscription) protocol.ReceiptsPush {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-sub.Events():
			if ev.Cursor != 0 {
				continue
			}
			var p protocol.ReceiptsPush
			if err := json.Unmarshal(ev.Data, &p); err != nil || p.Op != protocol.OpReceipts || ev.Type != protocol.OpReceipts {
				t.Fatalf("ephemeral push %s (%v); want a receipts frame", ev.Data, err)
			}
			return p
		case <-deadline:
			t.Fatal("no receipts push within 5 s")
		}
	}
}

// receiptsQueued returns how many receipts pushes wait on sub, dropping the log events.
func receiptsQueued(sub *hub.Subscription) int {
	n := 0
	for {
		select {
		case ev := <-sub.Events():
			if ev.Cursor == 0 {
				n++
			}
		default:
			return n
		}
	}
}

// TestReceiptsPushedToSender: in a group, the sender gets its messages' read counts pushed
// as members read: the first change at once, the changes within the next second in one
// push at its end, each entry equal to what GET receipts answers and only for messages
// whose counts changed; a direct conversation gets none.
func TestReceiptsPushedToSender(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	tm := &timers{}
	h := hub.New()
	svc := chat.New(chat.Options{Store: openStore(t), Hub: h, Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
		Config: chat.DefaultConfig(), Now: clk.Now, AfterFunc: tm.AfterFunc})
	e := &env{svc: svc, clock: clk}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin"} {
		e.user(t, u)
	}
	g, err := svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Members: []string{"bob", "carol", "dave", "erin"}})
	if err != nil {
		t.Fatal(err)
	}
	d := e.direct(t, "alice", "bob")
	sub := h.Subscribe("alice", 64)
	defer sub.Close()
	e.send(t, "alice", d)
	e.send(t, "alice", g.ConvID)

	// The first change (the send itself) pushes at once.
	p := nextReceipts(t, sub)
	if p.ConvID != g.ConvID || len(p.Receipts) != 1 || p.Receipts[0] != (protocol.Receipts{Seq: 1, MemberCount: 4}) {
		t.Fatalf("first push %+v; want seq 1 read by 0 of 4", p)
	}
	clk.Advance(300 * time.Millisecond)
	e.send(t, "alice", g.ConvID)
	for _, u := range []string{"bob", "carol"} {
		if _, err := svc.MarkRead(ctx, me(u), g.ConvID, 2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.MarkDelivered(ctx, me("dave"), g.ConvID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.MarkRead(ctx, me("erin"), g.ConvID, 1); err != nil {
		t.Fatal(err)
	}
	// Within the second: one push scheduled, none sent (nothing was started that could).
	if n := receiptsQueued(sub); n != 0 {
		t.Fatalf("%d pushes within the second of the first", n)
	}
	clk.Advance(700 * time.Millisecond)
	if n := tm.fire(); n != 1 {
		t.Fatalf("%d pushes scheduled for the end of the second, want 1", n)
	}
	p = nextReceipts(t, sub)
	if len(p.Receipts) != 2 || p.Receipts[0].Seq != 2 || p.Receipts[1].Seq != 1 {
		t.Fatalf("second push %+v; want seqs 2 and 1, newest first", p)
	}
	for _, r := range p.Receipts {
		want, err := svc.Receipts(ctx, me("alice"), g.ConvID, r.Seq)
		if err != nil || r != want {
			t.Errorf("pushed %+v, GET receipts %+v, %v", r, want, err)
		}
	}
	// Only what changed: erin, who had read seq 1, reads seq 2, a second later.
	clk.Advance(time.Second)
	if _, err := svc.MarkRead(ctx, me("erin"), g.ConvID, 2); err != nil {
		t.Fatal(err)
	}
	p = nextReceipts(t, sub)
	if want := (protocol.Receipts{Seq: 2, MemberCount: 4, ReadCount: 3, DeliveredCount: 3}); len(p.Receipts) != 1 || p.Receipts[0] != want {
		t.Fatalf("third push %+v; want only %+v", p, want)
	}
	// A read in the direct conversation pushes nothing.
	clk.Advance(time.Second)
	if _, err := svc.MarkRead(ctx, me("bob"), d, 1); err != nil {
		t.Fatal(err)
	}
	if tm.fire() != 0 || receiptsQueued(sub) != 0 {
		t.Fatal("a direct conversation's read was pushed as receipts")
	}
}
