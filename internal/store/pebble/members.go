package pebble

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// Member implements store.MemberReader.
func (r readTx) Member(ctx context.Context, convID, userID string) (store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Member{}, err
	}
	m, err := t.storedMember(convID, userID)
	if err != nil {
		return m, err
	}
	n, err := t.newest(convID) // an iterator: t.val keeps the row for AdvancePositions
	return n.member(m), err
}

// storedMember reads the member row as stored, without what the newest message implies;
// t.val holds the encoded row on return.
func (t *txn) storedMember(convID, userID string) (store.Member, error) {
	t.key = memberKey(t.key[:0], convID, userID)
	v, found, err := t.get(t.key)
	if err != nil {
		return store.Member{}, err
	}
	if !found {
		return store.Member{}, notFound("member %q of conversation %q", userID, convID)
	}
	m, err := decodeMember(v, convID, userID)
	if err != nil {
		return store.Member{}, corrupt(err, "member %q of conversation %q", userID, convID)
	}
	return m, nil
}

// Members implements store.MemberReader.
func (r readTx) Members(ctx context.Context, convID string) ([]store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	ms, err := t.storedMembers(convID)
	if err != nil {
		return nil, err
	}
	return t.asNewest(convID, ms)
}

// asNewest returns the stored rows ms of convID's members with what its newest message
// implies (latest.member).
func (t *txn) asNewest(convID string, ms []store.Member) ([]store.Member, error) {
	n, err := t.newest(convID)
	for i := range ms {
		ms[i] = n.member(ms[i])
	}
	return ms, err
}

// moveStanding moves user's entry in the standing index from ordinal from to ordinal to.
func (t *txn) moveStanding(convID, userID string, from, to int64) error {
	t.key = standingKey(t.key[:0], convID, from, userID)
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], convID, to, userID)
	return t.set(t.key, nil, nil, false)
}

// MembersAfter implements store.MemberReader: it scans the standing index o from after,
// reading only the rows of the page.
func (r readTx) MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]store.Member, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tStanding}, convID)
	ms, err := t.indexedMembers(convID, prefix, appendInt(slices.Clip(prefix), after+1), limit, "standing", func(k []byte) (string, error) {
		_, rest, err := readInt(k)
		if err != nil {
			return "", err
		}
		user, _, err := readStr(rest)
		return user, err
	})
	if err != nil {
		return nil, err
	}
	return t.asNewest(convID, ms)
}

// LastOrdinal implements store.MemberReader: the last key of the standing index.
func (r readTx) LastOrdinal(ctx context.Context, convID string) (int64, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	prefix := appendStr([]byte{tStanding}, convID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return 0, err
	}
	var last int64
	if it.Last() {
		if last, _, err = readInt(it.Key()[len(prefix):]); err != nil {
			return 0, errors.Join(corrupt(err, "standing of conversation %q", convID), it.Close())
		}
	}
	return last, closeIter(it)
}

// indexedMembers reads, as stored, the rows of the members of convID that an index names:
// its keys from lower to the end of prefix, at most limit of them (all when limit < 0),
// userOf reading the user from what follows prefix in a key.
func (t *txn) indexedMembers(convID string, prefix, lower []byte, limit int, index string, userOf func([]byte) (string, error)) ([]store.Member, error) {
	it, err := t.iter(lower, prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	var users []string
	for valid := it.First(); valid && (limit < 0 || len(users) < limit); valid = it.Next() {
		user, err := userOf(it.Key()[len(prefix):])
		if err != nil {
			return nil, errors.Join(corrupt(err, "%s of conversation %q", index, convID), it.Close())
		}
		users = append(users, user)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	ms := make([]store.Member, 0, len(users))
	for _, user := range users {
		m, err := t.storedMember(convID, user)
		if err != nil {
			return nil, err // an index entry without its row is corrupt, not "not found"
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// storedMembers reads the conversation's member rows as stored, in Members order.
func (t *txn) storedMembers(convID string) ([]store.Member, error) {
	prefix := appendStr([]byte{tRoster}, convID)
	ms, err := t.indexedMembers(convID, prefix, prefix, -1, "roster", func(k []byte) (string, error) {
		user, _, err := readStr(k)
		return user, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ms, func(a, b store.Member) int {
		return cmp.Or(cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.UserID, b.UserID))
	})
	return ms, nil
}

// Memberships implements store.MemberReader. Like the SQL join it replaces, it leaves out
// a membership whose conversation does not exist.
func (r readTx) Memberships(ctx context.Context, userID string) ([]store.Membership, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	prefix := appendStr([]byte{tMemberByUser}, userID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	var convs []string
	for valid := it.First(); valid; valid = it.Next() {
		conv, _, err := readStr(it.Key()[len(prefix):])
		if err != nil {
			return nil, errors.Join(corrupt(err, "memberships of user %q", userID), it.Close())
		}
		convs = append(convs, conv)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	var out []store.Membership
	for _, conv := range convs {
		m, err := t.storedMember(conv, userID)
		if err != nil {
			return nil, err // the index entry exists exactly when the member row does
		}
		c, err := t.storedConversation(conv)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		n, err := t.newest(conv)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Membership{Member: n.member(m), Conversation: n.conversation(c)})
	}
	return out, nil
}

// PutMember implements store.MemberWriter.
func (w writeTx) PutMember(ctx context.Context, m store.Member) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = memberKey(t.key[:0], m.ConvID, m.UserID)
	n := len(t.key)
	t.key = memberByUserKey(t.key, m.UserID, m.ConvID)
	mk, ik := t.key[:n], t.key[n:]
	prev, found, err := t.get(mk)
	if err != nil {
		return err
	}
	oldOrdinal := int64(0)
	if found {
		was, err := decodeMember(prev, m.ConvID, m.UserID)
		if err != nil {
			return corrupt(err, "member %q of conversation %q", m.UserID, m.ConvID)
		}
		oldOrdinal = was.Ordinal
	}
	t.enc = encodeMember(t.enc[:0], m)
	if err := t.set(mk, t.enc, prev, found); err != nil {
		return err
	}
	if found {
		if oldOrdinal == m.Ordinal {
			return nil // the index entries are there already
		}
		return t.moveStanding(m.ConvID, m.UserID, oldOrdinal, m.Ordinal)
	}
	if err := t.set(ik, nil, nil, false); err != nil {
		return err
	}
	t.key = rosterKey(t.key[:0], m.ConvID, m.UserID)
	if err := t.set(t.key, nil, nil, false); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], m.ConvID, m.Ordinal, m.UserID)
	if err := t.set(t.key, nil, nil, false); err != nil {
		return err
	}
	c, err := t.storedConversation(m.ConvID)
	if errors.Is(err, store.ErrNotFound) || err == nil && !c.ReadFanout() {
		return nil
	} else if err != nil {
		return err
	}
	return t.setReadFanout(m.UserID, m.ConvID, true)
}

// DeleteMember implements store.MemberWriter.
func (w writeTx) DeleteMember(ctx context.Context, convID, userID string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = memberKey(t.key[:0], convID, userID)
	n := len(t.key)
	t.key = memberByUserKey(t.key, userID, convID)
	mk, ik := t.key[:n], t.key[n:]
	prev, found, err := t.get(mk)
	if err != nil {
		return err
	}
	if !found {
		return notFound("delete member %q of conversation %q", userID, convID)
	}
	m, err := decodeMember(prev, convID, userID)
	if err != nil {
		return corrupt(err, "member %q of conversation %q", userID, convID)
	}
	if err := t.del(mk, prev); err != nil {
		return err
	}
	if err := t.del(ik, nil); err != nil {
		return err
	}
	t.key = rosterKey(t.key[:0], convID, userID) // mk and ik are done with: t.key is free
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	t.key = standingKey(t.key[:0], convID, m.Ordinal, userID)
	if err := t.del(t.key, nil); err != nil {
		return err
	}
	return t.setReadFanout(userID, convID, false)
}
