package pebble

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// indexReadFanout adds (on) or removes every member of the conversation to or from the
// index of read-fanout memberships (key R), when the conversation switches mode.
func (t *txn) indexReadFanout(convID string, on bool) error {
	ms, err := t.storedMembers(convID)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := t.setReadFanout(m.UserID, convID, on); err != nil {
			return err
		}
	}
	return nil
}

// setReadFanout writes or removes the index entry of user's membership of the read-fanout
// conversation convID.
func (t *txn) setReadFanout(user, convID string, on bool) error {
	t.key = readFanoutKey(t.key[:0], user, convID)
	_, found, err := t.get(t.key)
	switch {
	case err != nil || found == on:
		return err
	case on:
		return t.set(t.key, nil, nil, false)
	}
	return t.del(t.key, nil)
}

// ReadFanoutChanges implements store.MarkReader.
func (r readTx) ReadFanoutChanges(ctx context.Context, userID string, after int64) ([]store.Membership, int64, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, 0, err
	}
	prefix := appendStr([]byte{tReadFanout}, userID)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return nil, 0, err
	}
	var convs []string
	for valid := it.First(); valid; valid = it.Next() {
		conv, _, err := readStr(it.Key()[len(prefix):])
		if err != nil {
			return nil, 0, errors.Join(corrupt(err, "read-fanout memberships of user %q", userID), it.Close())
		}
		convs = append(convs, conv)
	}
	if err := closeIter(it); err != nil {
		return nil, 0, err
	}
	var out []store.Membership
	for _, conv := range convs {
		c, err := t.storedConversation(conv)
		if err != nil {
			return nil, 0, err // the index entry exists exactly when the member row does
		}
		if c.Mark <= after {
			continue
		}
		m, err := t.storedMember(conv, userID)
		if err != nil {
			return nil, 0, err
		}
		n, err := t.newest(conv)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, store.Membership{Member: n.member(m), Conversation: n.conversation(c)})
	}
	mark, err := t.lastMark()
	return out, mark, err
}

// lastMark reads the store's latest mark (0 before the first).
func (t *txn) lastMark() (int64, error) {
	v, found, err := t.get([]byte{tMark})
	if err != nil || !found {
		return 0, err
	}
	d := decoder{b: v}
	mark := d.varint()
	if err := d.done(); err != nil {
		return 0, corrupt(err, "the latest mark")
	}
	return mark, nil
}
