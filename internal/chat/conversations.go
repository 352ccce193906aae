package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// CreateConversation creates a direct or group conversation (docs/protocol.md section 5).
func (s *Service) CreateConversation(ctx context.Context, me Identity, req protocol.CreateConversationRequest) (protocol.ConversationBrief, error) {
	switch req.Type {
	case protocol.TypeDirect:
		return s.createDirect(ctx, me, req.PeerID)
	case protocol.TypeGroup:
		return s.createGroup(ctx, me, req)
	default:
		return protocol.ConversationBrief{}, invalid(`type must be "direct" or "group"`)
	}
}

func (s *Service) createDirect(ctx context.Context, me Identity, peer string) (protocol.ConversationBrief, error) {
	switch {
	case !protocol.ValidUserID(peer):
		return protocol.ConversationBrief{}, invalid("peer_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	case peer == me.UserID:
		return protocol.ConversationBrief{}, invalid("peer_id is the caller: a direct conversation needs two users")
	}
	id := directID(s.dirKey, me.UserID, peer)
	var out protocol.ConversationBrief
	err := s.update(ctx, "create direct", func(tx store.Tx, ob *outbox) error {
		if err := requireUsers(ctx, tx, []string{peer}); err != nil {
			return err
		}
		c, err := findDirect(ctx, tx, id, legacyDirectID(me.UserID, peer))
		if err == nil {
			return s.reopenDirect(ctx, tx, ob, c, me.UserID, &out)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		now := s.nowMS()
		c = store.Conversation{ID: id, Type: protocol.TypeDirect, MembersCount: 2, CreatedAt: now, UpdatedAt: now}
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		members := []store.Member{
			{ConvID: id, UserID: me.UserID, JoinedAt: now, Ordinal: 1},
			{ConvID: id, UserID: peer, JoinedAt: now, Ordinal: 2},
		}
		return s.announce(ctx, tx, ob, c, members, nil, nil, me.UserID, &out)
	})
	return out, err
}

// findDirect returns the pair's direct conversation under its id, or else under the legacy
// id an older server gave it, so that upgrading never makes a second conversation for a
// pair; store.ErrNotFound when there is neither.
func findDirect(ctx context.Context, tx store.ReadTx, id, legacyID string) (store.Conversation, error) {
	c, err := tx.Conversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return tx.Conversation(ctx, legacyID)
	}
	return c, err
}

// ExistingDirect returns the caller's direct conversation with peer when it exists and is
// in their list (not deleted): what creating it would answer, without writing. ok is false
// otherwise. The gateway uses it to answer such a creation even past the creation limit.
func (s *Service) ExistingDirect(ctx context.Context, me Identity, peer string) (b protocol.ConversationBrief, ok bool, err error) {
	if !protocol.ValidUserID(peer) || peer == me.UserID {
		return b, false, nil
	}
	err = s.view(ctx, "existing direct", func(tx store.ReadTx) error {
		c, err := findDirect(ctx, tx, directID(s.dirKey, me.UserID, peer), legacyDirectID(me.UserID, peer))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		m, err := loadMember(ctx, tx, c.ID, me.UserID)
		if errors.Is(err, ErrNotFound) || (err == nil && m.Hidden) {
			return nil
		} else if err != nil {
			return err
		}
		b, err = s.brief(ctx, tx, c, m, nil)
		ok = err == nil
		return err
	})
	return b, ok, err
}

// reopenDirect answers the creation of an existing direct conversation: the caller gets it,
// and if they had deleted it, it shows in their list again (they asked for it explicitly).
func (s *Service) reopenDirect(ctx context.Context, tx store.Tx, ob *outbox, c store.Conversation, userID string, out *protocol.ConversationBrief) error {
	m, err := loadMember(ctx, tx, c.ID, userID)
	if err != nil {
		return err
	}
	if m.Hidden {
		m.Hidden = false
		if err := tx.PutMember(ctx, m); err != nil {
			return err
		}
		b, err := s.brief(ctx, tx, c, m, nil)
		if err != nil {
			return err
		}
		*out = b
		return ob.appendData(ctx, tx, userID, protocol.EventConvUpdated, c.ID, s.nowMS(), b)
	}
	*out, err = s.brief(ctx, tx, c, m, nil)
	return err
}

func (s *Service) createGroup(ctx context.Context, me Identity, req protocol.CreateConversationRequest) (protocol.ConversationBrief, error) {
	if len(req.Name) > maxNameLen {
		return protocol.ConversationBrief{}, invalid("name longer than %d bytes", maxNameLen)
	}
	ids, err := s.memberList(me.UserID, req.Members)
	if err != nil {
		return protocol.ConversationBrief{}, err
	}
	if err := s.requireUsers(ctx, ids[1:]); err != nil {
		return protocol.ConversationBrief{}, err
	}
	var out protocol.ConversationBrief
	err = s.update(ctx, "create group", func(tx store.Tx, ob *outbox) error {
		now := s.nowMS()
		c := store.Conversation{
			ID: newID("g_"), Type: protocol.TypeGroup, Name: req.Name, OwnerID: me.UserID,
			ReadDetail: req.ReadDetail, MembersCount: len(ids), CreatedAt: now, UpdatedAt: now,
		}
		if err := tx.CreateConversation(ctx, c); err != nil {
			return err
		}
		members := make([]store.Member, len(ids))
		for i, u := range ids {
			members[i] = store.Member{ConvID: c.ID, UserID: u, JoinedAt: now, Ordinal: int64(i + 1)}
		}
		return s.announce(ctx, tx, ob, c, members, nil, nil, me.UserID, &out)
	})
	return out, err
}

// memberList validates and de-duplicates a group's initial members, the creator first.
func (s *Service) memberList(creator string, members []string) ([]string, error) {
	ids := []string{creator}
	seen := map[string]bool{creator: true}
	for _, u := range members {
		if !protocol.ValidUserID(u) {
			return nil, invalid("member %q is not a valid user_id", u)
		}
		if !seen[u] {
			seen[u] = true
			ids = append(ids, u)
		}
	}
	if len(ids) > s.cfg.MaxGroupMembers {
		return nil, s.errGroupTooLarge()
	}
	return ids, nil
}

// requireUsers checks that every one of ids is a user in a read transaction, before the
// write transaction that needs them: users are never deleted, so the answer stays true, and
// the single writer is not held for work that grows with the request.
func (s *Service) requireUsers(ctx context.Context, ids []string) error {
	return s.view(ctx, "require users", func(tx store.ReadTx) error {
		return requireUsers(ctx, tx, ids)
	})
}

// requireUsers returns ErrNotFound naming the first of ids that is not a user.
func requireUsers(ctx context.Context, tx store.ReadTx, ids []string) error {
	for _, u := range ids {
		if _, err := loadUser(ctx, tx, u); err != nil {
			return err
		}
	}
	return nil
}

// loadUser returns the user, or ErrNotFound naming it.
func loadUser(ctx context.Context, tx store.ReadTx, id string) (store.User, error) {
	u, err := tx.User(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return u, fmt.Errorf("%w: user %s", ErrNotFound, id)
	}
	return u, err
}

// announce writes members (all of them, new or changed) and emits conv_updated to every
// current member and to each removed member, each with the brief as they see it; a removed
// member's says "removed", so that their devices drop the conversation. It sets *out to the
// brief of the user `caller`.
//
// In a group that was read fanout before the change, only the members in joined, the
// removed ones and the caller are written and told (O(1) writes per join or leave, not
// O(members)); the others see the new member count in their next brief. joined nil means
// every member is new or changed (a creation, a rename).
func (s *Service) announce(ctx context.Context, tx store.Tx, ob *outbox, c store.Conversation, members, removed []store.Member, joined map[string]bool, caller string, out *protocol.ConversationBrief) error {
	now := s.nowMS()
	readBefore := c.ReadFanout()
	tell := func(user string) bool { return !readBefore || joined == nil || joined[user] || user == caller }
	for _, m := range members {
		if !tell(m.UserID) {
			continue
		}
		if err := tx.PutMember(ctx, m); err != nil {
			return err
		}
	}
	if c.Type == protocol.TypeGroup && !c.ReadFanout() && len(members) > s.cfg.WriteFanoutMax {
		// The group outgrew write fanout: from its next message on, messages are stored
		// once and members learn of them by the sync mark. It never switches back. The
		// conv_updated events below tell every member's devices.
		c.ReadFrom = c.MaxSeq + 1
		if err := tx.UpdateConversation(ctx, c); err != nil {
			return err
		}
	}
	for i, m := range append(slices.Clip(members), removed...) {
		if i < len(members) && !tell(m.UserID) {
			continue
		}
		b, err := s.brief(ctx, tx, c, m, members)
		if err != nil {
			return err
		}
		b.Removed = i >= len(members)
		if m.UserID == caller {
			*out = b
		}
		if err := ob.appendData(ctx, tx, m.UserID, protocol.EventConvUpdated, c.ID, now, b); err != nil {
			return err
		}
	}
	return nil
}

// UpdateMembers adds and removes group members. Only the owner may add or remove others;
// any member may remove themselves. An owner who leaves passes ownership to the
// longest-standing remaining member.
//
// Everything that grows with the request is done before the write transaction: the group
// size is checked from the request alone where it can be, and the added users are looked
// up in a read transaction. The writer then does work in proportion to the group.
func (s *Service) UpdateMembers(ctx context.Context, me Identity, convID string, req protocol.MembersRequest) (protocol.ConversationBrief, error) {
	if err := s.checkMembersRequest(req); err != nil {
		return protocol.ConversationBrief{}, err
	}
	err := s.view(ctx, "check members", func(tx store.ReadTx) error {
		c, _, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if err := mayChangeMembers(c, me.UserID, req); err != nil {
			return err
		}
		return requireUsers(ctx, tx, req.Add)
	})
	if err != nil {
		return protocol.ConversationBrief{}, err
	}
	var out protocol.ConversationBrief
	var joined, removed []store.Member
	err = s.update(ctx, "update members", func(tx store.Tx, ob *outbox) error {
		c, self, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if err := mayChangeMembers(c, me.UserID, req); err != nil { // the group may have changed since
			return err
		}
		if c.ReadFanout() {
			joined, removed, err = s.changeLargeGroup(ctx, tx, ob, c, self, req, &out)
			return err
		}
		members, err := tx.Members(ctx, convID)
		if err != nil {
			return err
		}
		var kept []store.Member
		var changed bool
		kept, removed, changed = applyMembership(c, members, req, s.nowMS())
		if !changed {
			out, err = s.brief(ctx, tx, c, self, members)
			return err
		}
		if len(kept) > s.cfg.MaxGroupMembers {
			return s.errGroupTooLarge()
		}
		for _, m := range removed {
			if err := tx.DeleteMember(ctx, convID, m.UserID); err != nil {
				return err
			}
		}
		c.MembersCount = len(kept)
		c.UpdatedAt = s.nowMS()
		if !slices.ContainsFunc(kept, func(m store.Member) bool { return m.UserID == c.OwnerID }) {
			c.OwnerID = ""
			if len(kept) > 0 {
				c.OwnerID = kept[0].UserID // kept is in order of standing
			}
		}
		if err := tx.UpdateConversation(ctx, c); err != nil {
			return err
		}
		joinedNow := joinedMembers(kept, members)
		joined = slices.DeleteFunc(slices.Clone(kept), func(m store.Member) bool { return !joinedNow[m.UserID] })
		return s.announce(ctx, tx, ob, c, kept, removed, joinedNow, me.UserID, &out)
	})
	if err == nil {
		s.counts.ChangeMembers(convID, joined, userIDs(removed))
		s.membersLeft(convID, userIDs(removed))
		if s.cluster != nil {
			s.cluster.MembersChanged(convID)
		}
	}
	return out, err
}

// checkMembersRequest checks what a members change can be judged on alone: the form of its
// user_ids, and the group size. Every user added and not also removed is a member afterwards
// (a user in both lists is removed), so more of them than the limit can never fit.
func (s *Service) checkMembersRequest(req protocol.MembersRequest) error {
	for _, u := range append(slices.Clip(req.Add), req.Remove...) {
		if !protocol.ValidUserID(u) {
			return invalid("%q is not a valid user_id", u)
		}
	}
	staying := make(map[string]bool, len(req.Add))
	for _, u := range req.Add {
		staying[u] = true
	}
	for _, u := range req.Remove {
		delete(staying, u)
	}
	if len(staying) > s.cfg.MaxGroupMembers {
		return s.errGroupTooLarge()
	}
	return nil
}

// errGroupTooLarge is the answer to a change past MaxGroupMembers.
func (s *Service) errGroupTooLarge() error {
	return invalid("a group has at most %d members", s.cfg.MaxGroupMembers)
}

// mayChangeMembers reports whether userID may apply req to conversation c: only a group's
// members change, and only its owner adds or removes others.
func mayChangeMembers(c store.Conversation, userID string, req protocol.MembersRequest) error {
	if c.Type != protocol.TypeGroup {
		return invalid("the members of a direct conversation cannot change")
	}
	if c.OwnerID != userID && (len(req.Add) > 0 || slices.ContainsFunc(req.Remove, func(u string) bool { return u != userID })) {
		return fmt.Errorf("%w: only the owner adds or removes other members", ErrForbidden)
	}
	return nil
}

// applyMembership returns the members after req, in order of standing, and those removed.
func applyMembership(c store.Conversation, members []store.Member, req protocol.MembersRequest, now int64) (kept, removed []store.Member, changed bool) {
	drop := make(map[string]bool, len(req.Remove))
	for _, u := range req.Remove {
		drop[u] = true
	}
	present := make(map[string]bool, len(members))
	var ordinal int64
	for _, m := range members {
		present[m.UserID] = true
		ordinal = max(ordinal, m.Ordinal)
		if drop[m.UserID] {
			removed = append(removed, m)
		} else {
			kept = append(kept, m)
		}
	}
	changed = len(removed) > 0
	for _, u := range req.Add {
		if present[u] || drop[u] {
			continue
		}
		present[u] = true
		ordinal++
		kept = append(kept, store.Member{ConvID: c.ID, UserID: u, JoinedAt: now, Ordinal: ordinal, JoinSeq: c.MaxSeq})
		changed = true
	}
	return kept, removed, changed
}

// joinedMembers returns the users of kept who were not in members.
func joinedMembers(kept, members []store.Member) map[string]bool {
	was := make(map[string]bool, len(members))
	for _, m := range members {
		was[m.UserID] = true
	}
	joined := make(map[string]bool)
	for _, m := range kept {
		if !was[m.UserID] {
			joined[m.UserID] = true
		}
	}
	return joined
}

// Rename sets a group's name (owner only). It is a Parley extension of the protocol.
func (s *Service) Rename(ctx context.Context, me Identity, convID, name string) (protocol.ConversationBrief, error) {
	return s.ChangeGroup(ctx, me, convID, GroupChange{Name: &name})
}

// GroupChange is a change of a group's settings; a nil field is left as it is.
type GroupChange struct {
	Name *string
	// Retention is the group's own retention: positive, within the operator's bounds
	// (store.RetentionPolicy.Allows), or 0 to follow the operator's again.
	Retention *time.Duration
}

// ChangeGroup applies ch to a group (owner only), all of it or, when any part is refused,
// none; a change to what the group already has is no change, and emits no event. It is a
// Parley extension of the protocol (docs/protocol.md, section 5.6).
func (s *Service) ChangeGroup(ctx context.Context, me Identity, convID string, ch GroupChange) (protocol.ConversationBrief, error) {
	if err := s.checkGroupChange(ch); err != nil {
		return protocol.ConversationBrief{}, err
	}
	var out protocol.ConversationBrief
	err := s.update(ctx, "change group", func(tx store.Tx, ob *outbox) error {
		c, self, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		switch {
		case c.Type != protocol.TypeGroup && ch.Name != nil:
			return invalid("a direct conversation has no name")
		case c.Type != protocol.TypeGroup:
			return invalid("a direct conversation has no retention of its own: the operator's applies")
		case c.OwnerID != me.UserID:
			return fmt.Errorf("%w: only the owner changes the group's name or retention", ErrForbidden)
		}
		was := c
		if ch.Name != nil {
			c.Name = *ch.Name
		}
		if ch.Retention != nil {
			c.RetentionMS = ch.Retention.Milliseconds()
		}
		if c == was {
			out, err = s.brief(ctx, tx, c, self, nil)
			return err
		}
		c.UpdatedAt = s.nowMS()
		if err := tx.UpdateConversation(ctx, c); err != nil {
			return err
		}
		members, err := tx.Members(ctx, convID)
		if err != nil {
			return err
		}
		return s.announce(ctx, tx, ob, c, members, nil, nil, me.UserID, &out)
	})
	return out, err
}

// checkGroupChange refuses a name too long or a retention outside the operator's bounds.
func (s *Service) checkGroupChange(ch GroupChange) error {
	if ch.Name != nil && len(*ch.Name) > maxNameLen {
		return invalid("name longer than %d bytes", maxNameLen)
	}
	if ch.Retention == nil || *ch.Retention == 0 {
		return nil
	}
	if d := *ch.Retention; d < 0 || !s.retention.Allows(d) {
		max := "no upper bound"
		if p := s.retention.GroupMax; p > 0 {
			max = fmt.Sprintf("at most %d", int64(p/time.Second))
		}
		return invalid("retention_seconds must be 0 (the server's retention) or between the server's bounds: at least %d, %s",
			int64(s.retention.GroupMin/time.Second), max)
	}
	return nil
}

// ListConversations returns one page of the caller's visible conversations, most recently
// active first. It reads all of the caller's memberships, which are small fixed-size rows,
// because the order follows each conversation's updated_at, which moves with every message
// and which no store index keeps per member; the briefs, with their last messages (the large
// part), are built only for the page, which also ends once it holds about pageBytes.
func (s *Service) ListConversations(ctx context.Context, me Identity, q PageQuery) (protocol.ConversationList, error) {
	out := protocol.ConversationList{Conversations: []protocol.ConversationBrief{}}
	k, limit, err := parsePage(q, tokenConversations)
	if err != nil {
		return out, err
	}
	err = s.view(ctx, "list conversations", func(tx store.ReadTx) error {
		rest, err := visibleMemberships(ctx, tx, me.UserID, k)
		if err != nil {
			return err
		}
		out.Next, err = fillPage(rest, k, limit, func(m store.Membership) (int, error) {
			b, err := s.brief(ctx, tx, m.Conversation, m.Member, nil)
			if err != nil {
				return 0, err
			}
			out.Conversations = append(out.Conversations, b)
			return briefOverhead + messageBytes(b.LastMessage), nil
		})
		out.HasMore = out.Next != ""
		return err
	})
	return out, err
}

// parsePage returns the key a page starts after (the zero key of kind for the first page)
// and its size.
func parsePage(q PageQuery, kind string) (pageKey, int, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil || q.After == "" {
		return pageKey{kind: kind}, limit, err
	}
	k, err := decodePageKey(q.After, kind)
	return k, limit, err
}

// visibleMemberships returns the user's memberships that are not hidden and come after k,
// in list order (byActivity).
func visibleMemberships(ctx context.Context, tx store.ReadTx, userID string, k pageKey) ([]store.Membership, error) {
	ms, err := tx.Memberships(ctx, userID)
	if err != nil {
		return nil, err
	}
	ms = slices.DeleteFunc(ms, func(m store.Membership) bool { return m.Hidden })
	slices.SortFunc(ms, byActivity)
	return afterKey(ms, k), nil
}

// UnreadTotal returns the caller's unread count over every conversation of their list, each
// counted as its brief counts it: the same on every device (it becomes the push badge).
func (s *Service) UnreadTotal(ctx context.Context, me Identity) (protocol.UnreadTotal, error) {
	var out protocol.UnreadTotal
	err := s.view(ctx, "unread total", func(tx store.ReadTx) error {
		ms, err := visibleMemberships(ctx, tx, me.UserID, pageKey{})
		for _, m := range ms {
			if n := unreadOf(m.Conversation, m.Member); n > 0 {
				out.Unread += n
				out.Conversations++
			}
		}
		return err
	})
	return out, err
}

// GetConversation returns one conversation as the caller sees it (also when deleted).
func (s *Service) GetConversation(ctx context.Context, me Identity, convID string) (protocol.ConversationBrief, error) {
	var out protocol.ConversationBrief
	err := s.view(ctx, "get conversation", func(tx store.ReadTx) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		out, err = s.brief(ctx, tx, c, m, nil)
		return err
	})
	return out, err
}

// DeleteConversation hides the conversation for the caller on all their devices and clears
// their history up to the current max_seq. Deleting again without new messages does nothing.
func (s *Service) DeleteConversation(ctx context.Context, me Identity, convID string) error {
	return s.update(ctx, "delete conversation", func(tx store.Tx, ob *outbox) error {
		c, m, err := loadConvMember(ctx, tx, convID, me.UserID)
		if err != nil {
			return err
		}
		if m.Hidden && m.ClearedSeq == c.MaxSeq {
			return nil
		}
		m.Hidden, m.ClearedSeq = true, max(m.ClearedSeq, c.MaxSeq)
		if err := tx.PutMember(ctx, m); err != nil {
			return err
		}
		return ob.appendData(ctx, tx, me.UserID, protocol.EventConvDeleted, convID, s.nowMS(),
			protocol.ConvDeletedData{ClearedSeq: m.ClearedSeq})
	})
}
