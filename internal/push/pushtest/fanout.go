package pushtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// FanoutConv names group g of AddFanout.
func FanoutConv(g int) string { return fmt.Sprintf("g_fanout%02d", g) }

// AddFanout writes the push benchmarks' world in tx: user "sender", and groups groups of
// size members each (FanoutConv), each member a user of its own ("u00000", …) whose device
// "phone" is registered with provider under the token "tok-" + user id. One message to
// each group then gives groups*size devices one event each.
func AddFanout(ctx context.Context, tx store.Tx, groups, size int, provider string) error {
	if err := tx.CreateUser(ctx, store.User{ID: "sender", Name: "Sender", TokenGen: 1}); err != nil {
		return err
	}
	for g := range groups {
		c := FanoutConv(g)
		if err := tx.CreateConversation(ctx, store.Conversation{ID: c, Type: protocol.TypeGroup, Name: c, OwnerID: "sender", MembersCount: size + 1}); err != nil {
			return err
		}
		if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: "sender", Ordinal: 1}); err != nil {
			return err
		}
		for j := range size {
			u := fmt.Sprintf("u%05d", g*size+j)
			if err := tx.CreateUser(ctx, store.User{ID: u, Name: u, TokenGen: 1}); err != nil {
				return err
			}
			if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: u, Ordinal: int64(j + 2)}); err != nil {
				return err
			}
			if err := tx.PutPushTarget(ctx, store.PushTarget{UserID: u, DeviceID: "phone", Provider: provider, Token: "tok-" + u, RegisteredAt: 1}); err != nil {
				return err
			}
		}
	}
	return nil
}

// SendAll sends workers*each notifications through p from workers goroutines at once
// (worker w sends note(w*each+i) to target(w)), fails tb for every one not delivered, and
// waits until the fake counted them all (wait is its WaitCount).
func SendAll(tb testing.TB, p push.Provider, workers, each int, target func(w int) push.Target,
	note func(i int) push.Notification, wait func(context.Context, int) error) {
	tb.Helper()
	var wg sync.WaitGroup
	failed := make(chan push.Result, workers*each)
	for w := range workers {
		wg.Go(func() {
			tg := target(w)
			for i := range each {
				if res := p.Send(context.Background(), tg, note(w*each+i)); res.Outcome != push.Delivered {
					failed <- res
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for res := range failed {
		tb.Errorf("Send = %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wait(ctx, workers*each); err != nil {
		tb.Fatal(err)
	}
}
