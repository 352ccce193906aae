package chat

import (
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// ListMembers returns one page of a conversation's members in order of standing
// (longest-standing first), with their names and roles, so that a device that joined late
// need not rebuild the list from events. Only members may list them: a non-member gets the
// same 404 as for a conversation that does not exist, as from every other call.
func (s *Service) ListMembers(ctx context.Context, me Identity, convID string, q PageQuery) (protocol.MembersPage, error) {
	out := protocol.MembersPage{Members: []protocol.Member{}}
	k, limit, err := parsePage(q, tokenMembers)
	if err != nil {
		return out, err
	}
	err = s.view(ctx, "list members", func(tx store.ReadTx) error {
		c, _, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		members, err := tx.MembersAfter(ctx, convID, k.at, limit+1) // the page, not the whole group
		if err != nil {
			return err
		}
		if out.HasMore = len(members) > limit; out.HasMore {
			members = members[:limit]
			out.Next = pageKey{kind: tokenMembers, at: members[limit-1].Ordinal}.encode()
		}
		for _, m := range members {
			w, err := wireMember(ctx, tx, c, m)
			if err != nil {
				return err
			}
			out.Members = append(out.Members, w)
		}
		return nil
	})
	return out, err
}

// changeLargeGroup applies req to c, a read-fanout group, as UpdateMembers does, reading
// only the rows of the users req names, the caller's, and (when the owner leaves) the
// first few by standing: a join to a group of 100,000 costs what a join to a group of 10
// costs. The member count is the conversation's, kept by every change; the next ordinal
// is the store's LastOrdinal. It returns the members who joined and those removed.
func (s *Service) changeLargeGroup(ctx context.Context, tx store.Tx, ob *outbox, c store.Conversation, self store.Member, req protocol.MembersRequest, out *protocol.ConversationBrief) (joined, removed []store.Member, err error) {
	drop := make(map[string]bool, len(req.Remove))
	for _, u := range req.Remove {
		if drop[u] {
			continue
		}
		drop[u] = true
		m, err := tx.Member(ctx, c.ID, u)
		if errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return nil, nil, err
		}
		removed = append(removed, m)
	}
	now := s.nowMS()
	last, err := tx.LastOrdinal(ctx, c.ID)
	if err != nil {
		return nil, nil, err
	}
	added := make(map[string]bool, len(req.Add))
	for _, u := range req.Add {
		if drop[u] || added[u] {
			continue
		}
		added[u] = true
		if _, err := tx.Member(ctx, c.ID, u); err == nil {
			continue // a member already
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
		last++
		joined = append(joined, store.Member{ConvID: c.ID, UserID: u, JoinedAt: now, Ordinal: last, JoinSeq: c.MaxSeq})
	}
	if len(joined) == 0 && len(removed) == 0 {
		*out, err = s.brief(ctx, tx, c, self, nil)
		return nil, nil, err
	}
	if c.MembersCount+len(joined)-len(removed) > s.cfg.MaxGroupMembers {
		return nil, nil, s.errGroupTooLarge()
	}
	for _, m := range removed {
		if err := tx.DeleteMember(ctx, c.ID, m.UserID); err != nil {
			return nil, nil, err
		}
	}
	c.MembersCount += len(joined) - len(removed)
	c.UpdatedAt = now
	if drop[c.OwnerID] {
		if c.OwnerID, err = s.longestStanding(ctx, tx, c.ID, joined); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.UpdateConversation(ctx, c); err != nil {
		return nil, nil, err
	}
	told := slices.Clip(joined) // the caller is told too, by announce, if still a member
	if !drop[self.UserID] {
		told = append(told, self)
	}
	return joined, removed, s.announce(ctx, tx, ob, c, told, removed, added, self.UserID, out)
}

// longestStanding returns the member of convID who joined first, after this transaction's
// removals, or else the first of joined (who are not written yet); "" when none is left.
func (s *Service) longestStanding(ctx context.Context, tx store.Tx, convID string, joined []store.Member) (string, error) {
	first, err := tx.MembersAfter(ctx, convID, 0, 1)
	switch {
	case err != nil:
		return "", err
	case len(first) > 0:
		return first[0].UserID, nil
	case len(joined) > 0:
		return joined[0].UserID, nil
	}
	return "", nil
}

// userIDs returns the users of members.
func userIDs(members []store.Member) []string {
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.UserID
	}
	return ids
}

// wireMember converts a membership to its listed form, with the user's name.
func wireMember(ctx context.Context, tx store.ReadTx, c store.Conversation, m store.Member) (protocol.Member, error) {
	u, err := tx.User(ctx, m.UserID)
	if err != nil {
		return protocol.Member{}, err // users are never deleted, so a member is always a user
	}
	role := protocol.RoleMember
	if m.UserID == c.OwnerID {
		role = protocol.RoleOwner
	}
	return protocol.Member{UserID: m.UserID, Name: u.Name, JoinedAt: m.JoinedAt, Role: role}, nil
}
