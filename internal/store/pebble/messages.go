package pebble

import (
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// Message implements store.MessageReader.
func (r readTx) Message(ctx context.Context, convID string, seq int64) (store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Message{}, err
	}
	m, found, err := t.message(convID, seq)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, notFound("message %q/%d", convID, seq)
	}
	return m, nil
}

// message reads the message (convID, seq); t.key and t.val are left holding its key and
// encoded row.
func (t *txn) message(convID string, seq int64) (store.Message, bool, error) {
	t.key = messageKey(t.key[:0], convID, seq)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return store.Message{}, false, err
	}
	m, err := decodeMessage(v, convID, seq)
	if err != nil {
		return store.Message{}, false, corrupt(err, "message %q/%d", convID, seq)
	}
	return m, true, nil
}

// MessageByClientID implements store.MessageReader.
func (r readTx) MessageByClientID(ctx context.Context, senderID, clientMsgID string) (store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Message{}, err
	}
	t.key = clientIDKey(t.key[:0], senderID, clientMsgID)
	ref, found, err := t.get(t.key)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, notFound("message %q of sender %q", clientMsgID, senderID)
	}
	conv, seq, err := readMsgRef(ref)
	if err != nil {
		return store.Message{}, corrupt(err, "message %q of sender %q", clientMsgID, senderID)
	}
	m, found, err := t.message(conv, seq)
	if err != nil {
		return store.Message{}, err
	}
	if !found {
		return store.Message{}, corrupt(errCorrupt, "message %q of sender %q: index without row", clientMsgID, senderID)
	}
	return m, nil
}

// Messages implements store.MessageReader. A Limit of zero or less selects nothing.
func (r readTx) Messages(ctx context.Context, convID string, mr store.MessageRange) ([]store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if mr.Limit <= 0 {
		return nil, nil
	}
	prefix := appendStr([]byte{tMessage}, convID)
	var from, to int64 // seqs in [from, to) when hasTo, else [from, ∞)
	hasTo := mr.BeforeSeq > 0
	var ok bool
	if hasTo {
		from, ok = succ(mr.Floor)
		to = mr.BeforeSeq
		if !ok || from >= to {
			return nil, nil
		}
	} else if from, ok = succ(max(mr.AfterSeq, mr.Floor)); !ok {
		return nil, nil
	}
	lower := appendInt(slices.Clip(prefix), from)
	upper := prefixEnd(prefix)
	if hasTo {
		upper = appendInt(slices.Clip(prefix), to)
	}
	it, err := t.iter(lower, upper)
	if err != nil {
		return nil, err
	}
	var ms []store.Message
	step := it.Next
	valid := it.First()
	if hasTo {
		step, valid = it.Prev, it.Last() // newest first, so that the limit keeps the latest
	}
	for ; valid && len(ms) < mr.Limit; valid = step() {
		m, err := iterMessage(it, prefix, convID)
		if err != nil {
			return nil, errors.Join(corrupt(err, "messages of conversation %q", convID), it.Close())
		}
		ms = append(ms, m)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	if hasTo {
		slices.Reverse(ms)
	}
	return ms, nil
}

// InsertMessage implements store.MessageWriter.
func (w writeTx) InsertMessage(ctx context.Context, m store.Message) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = messageKey(t.key[:0], m.ConvID, m.Seq)
	n := len(t.key)
	t.key = clientIDKey(t.key, m.SenderID, m.ClientMsgID)
	gk, kk := t.key[:n], t.key[n:]
	for _, k := range [...][]byte{gk, kk} {
		if found, err := t.exists(k); err != nil || found {
			if err == nil {
				err = exists("insert message %q/%d", m.ConvID, m.Seq)
			}
			return err
		}
	}
	t.enc = encodeMessage(t.enc[:0], m)
	if err := t.set(gk, t.enc, nil, false); err != nil {
		return err
	}
	return t.set(kk, gk[1:], nil, false) // gk[1:] is enc(conv) int(seq)
}

// RecallMessage implements store.MessageWriter. A message already recalled is left as it
// is; the first recall takes the message out of its attachment's references (uncount).
func (w writeTx) RecallMessage(ctx context.Context, convID string, seq, at int64) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	m, found, err := t.message(convID, seq)
	if err != nil {
		return err
	}
	if !found {
		return notFound("recall message %q/%d", convID, seq)
	}
	if m.Recalled {
		return nil
	}
	m.Content, m.Extra, m.Recalled = nil, nil, true
	t.enc = encodeMessage(t.enc[:0], m)
	if err := t.set(t.key, t.enc, t.val, true); err != nil { // t.key and t.val are still the message's
		return err
	}
	return t.uncountRecalled(m, at)
}

// uncountRecalled takes m, just recalled, out of its attachment's references (uncount),
// if it carries one: what a recall does to the count, hot (RecallMessage) or cold
// (PutOverlay).
func (t *txn) uncountRecalled(m store.Message, at int64) error {
	if m.AttachmentID == "" {
		return nil
	}
	return t.uncount(m.AttachmentID, m.ConvID, m.Seq, at)
}

// MessageAt bisects the hot messages by time (store.SearchMessageAt).
func (r readTx) MessageAt(ctx context.Context, convID string, ts int64) (int64, error) {
	return store.SearchMessageAt(ctx, r, convID, ts)
}
