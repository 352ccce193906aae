package pushtest

import (
	"context"
	"fmt"

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
