package chat

import (
	"context"
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
		members, err := tx.Members(ctx, convID) // at most --max-group-members rows
		if err != nil {
			return err
		}
		members = members[firstAfterOrdinal(members, k.at):]
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

// firstAfterOrdinal returns the index of the first of members (in order of standing) whose
// ordinal is above ordinal.
func firstAfterOrdinal(members []store.Member, ordinal int64) int {
	i := slices.IndexFunc(members, func(m store.Member) bool { return m.Ordinal > ordinal })
	if i < 0 {
		return len(members)
	}
	return i
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
