package chat

import (
	"context"
	"testing"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store/sqlite"
	"github.com/parleychat/parley/protocol"
)

// TestReceiptsForgetSendersWhoLeft: a sender removed from a group is dropped from what the
// receipts pushes hold of it, and the group is dropped with its last sender.
func TestReceiptsForgetSendersWhoLeft(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := New(Options{Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")), Config: DefaultConfig()})
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, _, err := s.CreateUser(ctx, u, ""); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := Identity{UserID: "alice", DeviceID: "p"}, Identity{UserID: "bob", DeviceID: "p"}
	g, err := s.CreateConversation(ctx, alice, protocol.CreateConversationRequest{Type: "group", Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, who := range []Identity{alice, bob} {
		req := protocol.SendRequest{ConvID: g.ConvID, ClientMsgID: "m" + string(rune('0'+i)), ContentType: 1, Content: []byte(`"x"`)}
		if _, err := s.Send(ctx, who, req); err != nil {
			t.Fatal(err)
		}
	}
	senders := func() []string {
		r := s.receipts.shard(g.ConvID)
		r.mu.Lock()
		defer r.mu.Unlock()
		var out []string
		if c := r.convs[g.ConvID]; c != nil {
			for u := range c.sent {
				out = append(out, u)
			}
		}
		return out
	}
	if got := senders(); len(got) != 2 {
		t.Fatalf("senders held %v, want alice and bob", got)
	}
	if _, err := s.UpdateMembers(ctx, alice, g.ConvID, protocol.MembersRequest{Remove: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	if got := senders(); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("senders held after bob left: %v, want alice only", got)
	}
	s.membersLeft(g.ConvID, []string{"alice"})
	r := s.receipts.shard(g.ConvID)
	r.mu.Lock()
	_, still := r.convs[g.ConvID]
	r.mu.Unlock()
	if still {
		t.Fatal("the group is held with no sender left")
	}
}
