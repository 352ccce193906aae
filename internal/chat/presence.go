package chat

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// PresenceVisible returns which of users the caller may see the presence of, each with
// whether they hide it: the caller themself, and the users who share a conversation with
// the caller that is not read-fanout (a large group never shows per-member presence).
// Anyone else is left out, unknown users included, so that the caller cannot tell a
// stranger from a user who hides their presence (docs/protocol.md 9.11).
func (s *Service) PresenceVisible(ctx context.Context, me Identity, users []string) (map[string]bool, error) {
	out := make(map[string]bool, len(users))
	err := s.view(ctx, "presence visibility", func(tx store.ReadTx) error {
		peers, err := sharedPeers(ctx, tx, me.UserID)
		if err != nil {
			return err
		}
		for _, id := range users {
			if _, ok := peers[id]; !ok && id != me.UserID {
				continue
			}
			u, err := tx.User(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			out[id] = u.PresenceHidden
		}
		return nil
	})
	return out, err
}

// sharedPeers returns the members of userID's conversations that are not read-fanout.
func sharedPeers(ctx context.Context, tx store.ReadTx, userID string) (map[string]struct{}, error) {
	ms, err := tx.Memberships(ctx, userID)
	if err != nil {
		return nil, err
	}
	peers := make(map[string]struct{})
	for _, m := range ms {
		if m.Conversation.ReadFanout() {
			continue
		}
		members, err := tx.Members(ctx, m.ConvID)
		if err != nil {
			return nil, err
		}
		for _, p := range members {
			peers[p.UserID] = struct{}{}
		}
	}
	return peers, nil
}

// SetPresenceHidden stores whether the caller hides their presence.
func (s *Service) SetPresenceHidden(ctx context.Context, me Identity, hidden bool) error {
	return s.update(ctx, "set presence", func(tx store.Tx, _ *outbox) error {
		return tx.SetPresenceHidden(ctx, me.UserID, hidden)
	})
}
