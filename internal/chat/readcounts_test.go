package chat_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// TestReceiptCountsMatchABruteForceCount: in a group that shows counts only, "read by N of
// M" (answered from positions held in memory once asked for) equals a count over the
// members' stored positions, after random concurrent reads (many of them stale, which must
// not move a position back), sends (the sender reads its own message), receipts asked
// meanwhile, and a member leaving.
func TestReceiptCountsMatchABruteForceCount(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var users []string
	for i := range 30 {
		u := fmt.Sprintf("u%02d", i)
		e.user(t, u)
		users = append(users, u)
	}
	g, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "big", Members: users})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		e.send(t, "alice", g.ConvID)
	}
	sentByU00 := 0 // messages after the first 20, all sent by member u00
	check := func(what string) {
		t.Helper()
		var members []store.Member
		if err := e.store.View(ctx, func(tx store.ReadTx) error {
			var err error
			members, err = tx.Members(ctx, g.ConvID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 25; seq++ {
			r, err := e.svc.Receipts(ctx, me("alice"), g.ConvID, seq)
			if seq > 20+int64(sentByU00) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: Receipts(%d): %v", what, seq, err)
			}
			sender := "alice"
			if seq > 20 {
				sender = "u00"
			}
			want := protocol.Receipts{Seq: seq}
			for _, m := range members {
				if m.UserID == sender {
					continue
				}
				want.MemberCount++
				if m.ReadSeq >= seq {
					want.ReadCount++
				}
				if m.DeliveredSeq >= seq {
					want.DeliveredCount++
				}
			}
			if r != want {
				t.Fatalf("%s: Receipts(%d) = %+v, brute force %+v", what, seq, r, want)
			}
		}
	}
	check("before any read")

	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 3))
			for range 15 {
				seq := int64(1 + r.IntN(20))
				if _, err := e.svc.MarkRead(ctx, me(u), g.ConvID, seq); err != nil {
					t.Error(err)
				}
				if r.IntN(3) == 0 {
					if _, err := e.svc.Receipts(ctx, me(u), g.ConvID, seq); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	check("after concurrent reads")
	for range 3 {
		e.send(t, "u00", g.ConvID)
		sentByU00++
	}
	check("after sends by a member")
	if _, err := e.svc.UpdateMembers(ctx, me("u05"), g.ConvID, protocol.MembersRequest{Remove: []string{"u05"}}); err != nil {
		t.Fatal(err)
	}
	check("after a member left")
}
