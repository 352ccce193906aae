package pebble

import (
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// Cursors implements store.EventReader.
func (r readTx) Cursors(ctx context.Context, userID string) (store.CursorBounds, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.CursorBounds{}, err
	}
	b, found, err := t.cursors(userID)
	if err == nil && !found {
		err = notFound("cursors of user %q", userID)
	}
	return b, err
}

// cursors returns the user's log bounds (keys.go): Last is the highest of the stored Last,
// the Pruned bound and the newest event's cursor. found is false for an unknown user.
//
// The newest event is read before the bounds key: the writer's batch reads the live
// database, not a snapshot, and a retention pass beside it (Store.PruneEvents) may remove
// that event and raise Pruned over it in one batch between the two reads; in this order
// either read sees the cursor. t.val holds the bounds key's value on return.
func (t *txn) cursors(user string) (b store.CursorBounds, found bool, err error) {
	prefix := appendStr([]byte{tEvent}, user)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return b, false, err
	}
	var newest int64
	if it.Last() {
		c, _, err := readInt(it.Key()[len(prefix):])
		if err != nil {
			return b, false, errors.Join(corrupt(err, "events of user %q", user), it.Close())
		}
		newest = c
	}
	if err := closeIter(it); err != nil {
		return b, false, err
	}
	t.key = boundsKey(t.key[:0], user)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return b, false, err
	}
	if b, err = decodeBounds(v); err != nil {
		return b, false, corrupt(err, "cursors of user %q", user)
	}
	b.Last = max(b.Last, b.Pruned, newest)
	return b, true, nil
}

// AppendEvent implements store.EventWriter. The single writer serializes every
// AppendEvent, so cursors are gapless per user; an undone request deletes its event, which
// takes the user's last cursor back with it.
func (w writeTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	b, found, err := t.cursors(e.UserID)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, notFound("append event: user %q", e.UserID)
	}
	cursor := b.Last + 1
	// The event is new: cursor is above every cursor the user ever had. The hour hint may
	// exist; an undo leaves it, harmlessly (keys.go).
	t.key = eventKey(t.key[:0], e.UserID, cursor)
	n := len(t.key)
	t.key = eventHourKey(t.key, hourOf(e.TS), e.UserID)
	ek, hk := t.key[:n], t.key[n:]
	e.Message = nil
	t.enc = encodeEvent(t.enc[:0], e)
	if err := t.set(ek, t.enc, nil, false); err != nil {
		return 0, err
	}
	if err := t.set(hk, nil, nil, true); err != nil {
		return 0, err
	}
	return cursor, nil
}

// AdvancePositions implements store.MemberWriter. The single writer serializes it with
// every other write of the member, so reading the row and writing the larger positions back
// is atomic.
func (w writeTx) AdvancePositions(ctx context.Context, convID, userID string, readSeq, deliveredSeq int64) (store.Member, bool, error) {
	m, err := w.Member(ctx, convID, userID)
	if err != nil {
		return m, false, err
	}
	if readSeq <= m.ReadSeq && deliveredSeq <= m.DeliveredSeq {
		return m, false, nil
	}
	m.ReadSeq, m.DeliveredSeq = max(m.ReadSeq, readSeq), max(m.DeliveredSeq, deliveredSeq)
	t := w.t
	prev := slices.Clone(t.val) // the row Member read
	t.key = memberKey(t.key[:0], convID, userID)
	t.enc = encodeMember(t.enc[:0], m)
	return m, true, t.set(t.key, t.enc, prev, true)
}
