package live

import (
	"context"
	"slices"
	"testing"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tasks"
	"github.com/parleychat/parley/protocol"
)

// noCounts is a ReceiptCounter of a group whose senders are all still members.
type noCounts struct{}

func (noCounts) ReceiptCounts(_ context.Context, _ string, sent map[string][]int64) (map[string][]protocol.Receipts, error) {
	out := make(map[string][]protocol.Receipts, len(sent))
	for u := range sent {
		out[u] = nil
	}
	return out, nil
}

// TestReceiptsForgetSendersWhoLeft: a sender removed from a group is dropped from what the
// receipts pushes hold of it, and the group is dropped with its last sender.
func TestReceiptsForgetSendersWhoLeft(t *testing.T) {
	g := tasks.New()
	defer g.Close()
	rp := NewReceiptPushes(ReceiptPushesOptions{Counter: noCounts{}, Hub: hub.New(), Tasks: g})
	for i, who := range []string{"alice", "bob"} {
		rp.Sent(store.Message{ConvID: "g_1", Seq: int64(i + 1), SenderID: who})
	}
	senders := func() (out []string, held bool) {
		r := rp.shard("g_1")
		r.mu.Lock()
		defer r.mu.Unlock()
		c := r.convs["g_1"]
		if c == nil {
			return nil, false
		}
		for u := range c.sent {
			out = append(out, u)
		}
		slices.Sort(out)
		return out, true
	}
	if got, _ := senders(); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Fatalf("senders held %v, want alice and bob", got)
	}
	rp.MembersLeft("g_1", []string{"bob"})
	if got, _ := senders(); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("senders held after bob left: %v, want alice only", got)
	}
	rp.MembersLeft("g_1", []string{"alice"})
	if _, held := senders(); held {
		t.Fatal("the group is held with no sender left")
	}
}
