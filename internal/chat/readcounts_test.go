package chat_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// TestReceiptCountsMatchABruteForceCount: in a group that shows counts only, "read by N of
// M" (answered from positions held in memory once asked for) equals a count over the
// members' stored positions, after random concurrent reads (many of them stale, which must
// not move a position back), sends (the sender reads its own message), receipts asked
// meanwhile, a member leaving, and joins and leaves racing reads (the counts follow member
// changes without being built again), in a write-fanout and a read-fanout group (whose
// reads are batched).
func TestReceiptCountsMatchABruteForceCount(t *testing.T) {
	for _, fanout := range []string{protocol.FanoutWrite, protocol.FanoutRead} {
		t.Run(fanout, func(t *testing.T) {
			cfg := chat.DefaultConfig()
			if fanout == protocol.FanoutRead {
				cfg.WriteFanoutMax = 10
			}
			testReceiptCounts(t, newEnvWith(t, cfg), fanout)
		})
	}
}

func testReceiptCounts(t *testing.T, e *env, fanout string) {
	ctx := context.Background()
	var users []string
	for i := range 30 {
		u := fmt.Sprintf("u%02d", i)
		e.user(t, u)
		users = append(users, u)
	}
	g, err := e.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "group", Name: "big", Members: users})
	if err != nil || g.Fanout != fanout {
		t.Fatalf("group %+v, %v; want fanout %s", g, err, fanout)
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

	// Joins and leaves, each its own call, racing reads by the members who stay.
	var joiners []string
	for i := range 10 {
		joiners = append(joiners, fmt.Sprintf("n%02d", i))
		e.user(t, joiners[i])
	}
	for i, u := range users[10:30] {
		wg.Go(func() {
			var err error
			switch {
			case i < 10:
				_, err = e.svc.UpdateMembers(ctx, me("alice"), g.ConvID, protocol.MembersRequest{Add: []string{joiners[i]}})
			case i < 15:
				_, err = e.svc.UpdateMembers(ctx, me(u), g.ConvID, protocol.MembersRequest{Remove: []string{u}})
			default:
				_, err = e.svc.MarkRead(ctx, me(u), g.ConvID, int64(15+i))
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	check("after joins and leaves racing reads")
	for _, u := range joiners[:5] {
		if _, err := e.svc.MarkRead(ctx, me(u), g.ConvID, 23); err != nil {
			t.Fatal(err)
		}
	}
	check("after joiners read")
}
