package pebble

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Events implements store.EventReader. A limit of zero or less selects nothing.
//
// It reads the page of events first, then the messages they reference in key order, through
// one iterator over the message table: the events of a catch-up interleave the messages of
// many conversations, and seeking to each in the log's order made every seek a fresh descent
// (most of the catch-up's time); in key order, the messages of one conversation are
// neighbours, and Pebble reaches each from the previous one by stepping (SeekGE after a
// SeekGE to a smaller key tries Next first).
func (r readTx) Events(ctx context.Context, userID string, after int64, limit int) ([]store.Event, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	from, ok := succ(after)
	if limit <= 0 || !ok {
		return nil, nil
	}
	es, err := t.events(userID, from, limit)
	if err != nil {
		return nil, err
	}
	if err := t.attachMessages(es); err != nil {
		return nil, err
	}
	return es, nil
}

// events reads up to limit events of userID from cursor from on, without their messages.
func (t *txn) events(userID string, from int64, limit int) ([]store.Event, error) {
	prefix := appendStr([]byte{tEvent}, userID)
	it, err := t.iter(appendInt(slices.Clip(prefix), from), prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	es := make([]store.Event, 0, min(limit, protocol.MaxSyncLimit+1))
	for valid := it.First(); valid && len(es) < limit; valid = it.Next() {
		e, _, err := iterEvent(it, prefix, userID)
		if err != nil {
			return nil, errors.Join(corrupt(err, "events of user %q", userID), it.Close())
		}
		es = append(es, e)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	return es, nil
}

// attachMessages fills in the Message of every "message" event of es, in key order (see
// Events). The payload is the message itself, stored once per conversation; a reference to
// a missing message leaves Message nil.
func (t *txn) attachMessages(es []store.Event) error {
	refs := make([]int, 0, len(es)) // indexes of the message events, sorted by (conv, seq)
	for i := range es {
		if es[i].Type == protocol.EventMessage {
			refs = append(refs, i)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	slices.SortFunc(refs, func(a, b int) int {
		return cmp.Or(cmp.Compare(es[a].ConvID, es[b].ConvID), cmp.Compare(es[a].Seq, es[b].Seq))
	})
	it, err := t.iter([]byte{tMessage}, []byte{tMessage + 1})
	if err != nil {
		return err
	}
	msgs := make([]store.Message, len(refs))
	for n, i := range refs {
		found, err := t.seekMessage(it, es[i].ConvID, es[i].Seq, &msgs[n])
		if err != nil {
			return errors.Join(err, it.Close())
		}
		if found {
			es[i].Message = &msgs[n]
		}
	}
	return closeIter(it)
}

// seekMessage reads the message (convID, seq) through it, an iterator over the message
// table, into m.
func (t *txn) seekMessage(it *pebble.Iterator, convID string, seq int64, m *store.Message) (bool, error) {
	t.key = messageKey(t.key[:0], convID, seq)
	if !it.SeekGE(t.key) || !bytes.Equal(it.Key(), t.key) {
		if err := it.Error(); err != nil {
			return false, fmt.Errorf("%w: pebble: read: %w", store.ErrUnavailable, err)
		}
		return false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return false, fmt.Errorf("%w: pebble: read: %w", store.ErrUnavailable, err)
	}
	if *m, err = decodeMessage(v, convID, seq); err != nil {
		return false, corrupt(err, "message %q/%d", convID, seq)
	}
	return true, nil
}
