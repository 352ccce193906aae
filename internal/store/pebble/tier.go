package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// The cold tier's index and overlay (keys.go: B, P, S, W, O). Every read here is an
// ordinary read and every write an ordinary Update's: the hot state (hot.go) holds none of
// these keys, and the message, conversation and member rows that SealSegment changes go
// through txn.set and txn.del, which drop what it holds of them.

// segment reads the segment row under key; t.val is left holding its encoding.
func (t *txn) segment(key string) (store.Segment, bool, error) {
	t.key = segmentKey(t.key[:0], key)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return store.Segment{}, false, err
	}
	s, err := decodeSegment(v, key)
	if err != nil {
		return store.Segment{}, false, corrupt(err, "segment %q", key)
	}
	return s, true, nil
}

// indexedSegment reads the segment that an index entry names (its value is the key).
func (t *txn) indexedSegment(key []byte, what string) (store.Segment, error) {
	s, found, err := t.segment(string(key))
	if err == nil && !found {
		err = corrupt(errCorrupt, "%s: segment %q: index without row", what, key)
	}
	return s, err
}

// segmentsFrom reads up to limit segments named by the index entries in [lower, upper), in
// key order (the last one only when last is set).
func (t *txn) segmentsFrom(lower, upper []byte, limit int, last bool, what string) ([]store.Segment, error) {
	it, err := t.iter(lower, upper)
	if err != nil {
		return nil, err
	}
	var keys [][]byte // collected first: reading a row reuses t's buffers, not the iterator
	valid := it.First()
	if last {
		valid = it.Last()
	}
	for ; valid && len(keys) < limit; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, errors.Join(corrupt(err, "%s", what), it.Close())
		}
		keys = append(keys, bytes.Clone(v))
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	out := make([]store.Segment, 0, len(keys))
	for _, k := range keys {
		s, err := t.indexedSegment(k, what)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Segments implements store.SegmentReader: a scan of S from (convID, fromSeq).
func (r readTx) Segments(ctx context.Context, convID string, fromSeq int64, limit int) ([]store.Segment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	prefix := appendStr([]byte{tSealed}, convID)
	return t.segmentsFrom(appendInt(slices.Clip(prefix), fromSeq), prefixEnd(prefix), limit, false, "segments of "+convID)
}

// LastSegment implements store.SegmentReader: the last key of S under convID.
func (r readTx) LastSegment(ctx context.Context, convID string) (store.Segment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Segment{}, err
	}
	prefix := appendStr([]byte{tSealed}, convID)
	return oneSegment(t.segmentsFrom(prefix, prefixEnd(prefix), 1, true, "last segment of "+convID))
}

// SegmentAtTime implements store.SegmentReader: one seek into W (see keys.go for why the
// first entry at or after ts is the first segment by seq).
func (r readTx) SegmentAtTime(ctx context.Context, convID string, ts int64) (store.Segment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Segment{}, err
	}
	prefix := appendStr([]byte{tSealedByTime}, convID)
	return oneSegment(t.segmentsFrom(appendInt(slices.Clip(prefix), ts), prefixEnd(prefix), 1, false, "segment by time of "+convID))
}

// oneSegment returns the one segment of ss, or ErrNotFound when there is none.
func oneSegment(ss []store.Segment, err error) (store.Segment, error) {
	if err != nil {
		return store.Segment{}, err
	}
	if len(ss) == 0 {
		return store.Segment{}, notFound("segment")
	}
	return ss[0], nil
}

// PendingSegments implements store.SegmentReader: a scan of P, then each row.
func (r readTx) PendingSegments(ctx context.Context, limit int) ([]store.Segment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	keys, err := t.tableIDs([]byte{tPending}, limit, "pending segments")
	if err != nil {
		return nil, err
	}
	out := make([]store.Segment, 0, len(keys))
	for _, k := range keys {
		s, err := t.indexedSegment([]byte(k), "pending segments")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Overlays implements store.SegmentReader: a scan of O over [from, to].
func (r readTx) Overlays(ctx context.Context, convID string, from, to int64) ([]store.Message, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if from > to {
		return nil, nil
	}
	prefix := appendStr([]byte{tOverlay}, convID)
	upper := prefixEnd(prefix)
	if to < math.MaxInt64 {
		upper = appendInt(slices.Clip(prefix), to+1)
	}
	it, err := t.iter(appendInt(slices.Clip(prefix), from), upper)
	if err != nil {
		return nil, err
	}
	var out []store.Message
	for valid := it.First(); valid; valid = it.Next() {
		m, err := iterMessage(it, prefix, convID)
		if err != nil {
			return nil, errors.Join(corrupt(err, "overlays of conversation %q", convID), it.Close())
		}
		out = append(out, m)
	}
	return out, closeIter(it)
}

// ConversationIDs implements store.SegmentReader: a scan of the conversation rows c.
func (r readTx) ConversationIDs(ctx context.Context, after string, limit int) ([]string, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	// The smallest key after after's: no encoded id extends another (keys.go).
	return t.tableIDs(append(convKey(nil, after), 0), limit, "conversations")
}

// tableIDs returns the ids of up to limit keys of a table whose keys are its byte and
// enc(id) alone (c, P), from lower on.
func (t *txn) tableIDs(lower []byte, limit int, what string) ([]string, error) {
	it, err := t.iter(lower, []byte{lower[0] + 1})
	if err != nil {
		return nil, err
	}
	var out []string
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		id, rest, err := readStr(it.Key()[1:])
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "%s", what), it.Close())
		}
		out = append(out, id)
	}
	return out, closeIter(it)
}

// AddSegment implements store.SegmentWriter: the row, pending, and its entry in P.
func (w writeTx) AddSegment(ctx context.Context, seg store.Segment) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = segmentKey(t.key[:0], seg.Key)
	if found, err := t.exists(t.key); err != nil || found {
		if err == nil {
			err = exists("add segment %q", seg.Key)
		}
		return err
	}
	seg.Sealed = false
	if err := t.set(t.key, encodeSegment(t.enc[:0], seg), nil, false); err != nil {
		return err
	}
	return t.set(pendingKey(t.key[:0], seg.Key), nil, nil, false)
}

// hotRow is one stored message row: its key and its encoding, as SealSegment removes it.
type hotRow struct {
	key, val []byte
	m        store.Message
}

// SealSegment implements store.SegmentWriter. It reads everything it checks before its
// first write, so that a conflict leaves the batch as it found it, undo log included.
func (w writeTx) SealSegment(ctx context.Context, key string, recalled int) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	seg, found, err := t.segment(key)
	if err != nil {
		return err
	}
	if !found || seg.Sealed {
		return notFound("seal segment %q: none pending", key)
	}
	prevSeg := bytes.Clone(t.val)
	rows, err := t.hotRows(seg)
	if err != nil {
		return err
	}
	if int64(len(rows)) != seg.LastSeq-seg.FirstSeq+1 {
		return fmt.Errorf("pebble: seal segment %q: %d of messages %d..%d stored hot: %w", key, len(rows), seg.FirstSeq, seg.LastSeq, store.ErrConflict)
	}
	n := 0
	for _, r := range rows {
		if r.m.Recalled {
			n++
		}
	}
	if n != recalled {
		return fmt.Errorf("pebble: seal segment %q: %d recalled, not %d: %w", key, n, recalled, store.ErrConflict)
	}
	if err := t.removeHot(seg.ConvID, seg.LastSeq, rows); err != nil {
		return err
	}
	if err := t.markSegment(seg, true, prevSeg); err != nil {
		return err
	}
	if err := t.del(pendingKey(t.key[:0], key), nil); err != nil {
		return err
	}
	if err := t.set(sealedKey(t.key[:0], seg.ConvID, seg.LastSeq), []byte(key), nil, false); err != nil {
		return err
	}
	return t.set(sealedByTimeKey(t.key[:0], seg.ConvID, seg.LastTS, seg.LastSeq), []byte(key), nil, false)
}

// removeHot deletes rows, convID's hot messages up to upTo, and their client id keys,
// keeping what the newest of them implied (impliedByNewest): what sealing and retention
// both do to the hot rows they take away.
func (t *txn) removeHot(convID string, upTo int64, rows []hotRow) error {
	if err := t.impliedByNewest(convID, upTo); err != nil {
		return err
	}
	for _, r := range rows {
		if err := t.del(r.key, r.val); err != nil {
			return err
		}
		// The client id key's value is the message key without its table byte.
		if err := t.del(clientIDKey(t.key[:0], r.m.SenderID, r.m.ClientMsgID), r.key[1:]); err != nil {
			return err
		}
	}
	return nil
}

// ExpireMessages implements store.SegmentWriter: the rows as SealSegment removes them,
// then each one's attachment reference key A, where an append left one and no recall took
// it (uncount checks), uncounted.
func (w writeTx) ExpireMessages(ctx context.Context, convID string, throughSeq, at int64) (int, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	if throughSeq < 1 {
		return 0, nil
	}
	rows, err := t.hotRows(store.Segment{ConvID: convID, FirstSeq: 1, LastSeq: throughSeq})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	if err := t.removeHot(convID, throughSeq, rows); err != nil {
		return 0, err
	}
	for _, r := range rows {
		if r.m.AttachmentID != "" {
			if err := t.uncount(r.m.AttachmentID, convID, r.m.Seq, at); err != nil {
				return 0, err
			}
		}
	}
	return len(rows), nil
}

// ExpireSegment implements store.SegmentWriter: the row back to pending (S and W out, P
// in), the overlay keys of its range deleted, and each attached message's reference key
// A, which SealSegment left and a recall in the overlay took, uncounted where it is still
// there.
func (w writeTx) ExpireSegment(ctx context.Context, key string, attached []store.Message, at int64) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	seg, found, err := t.segment(key)
	if err != nil {
		return err
	}
	if !found || !seg.Sealed {
		return notFound("expire segment %q: none sealed", key)
	}
	prev := bytes.Clone(t.val)
	if err := store.CheckAttached(seg, attached); err != nil {
		return err
	}
	prefix := appendStr([]byte{tOverlay}, seg.ConvID)
	it, err := t.iter(appendInt(slices.Clip(prefix), seg.FirstSeq), appendInt(slices.Clip(prefix), seg.LastSeq+1))
	if err != nil {
		return err
	}
	var overlays [][2][]byte // collected first: the iterator does not follow the batch's writes
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(corrupt(err, "overlays of conversation %q", seg.ConvID), it.Close())
		}
		overlays = append(overlays, [2][]byte{bytes.Clone(it.Key()), bytes.Clone(v)})
	}
	if err := closeIter(it); err != nil {
		return err
	}
	for _, o := range overlays {
		if err := t.del(o[0], o[1]); err != nil {
			return err
		}
	}
	for _, m := range attached {
		if err := t.uncount(m.AttachmentID, m.ConvID, m.Seq, at); err != nil {
			return err
		}
	}
	if err := t.markSegment(seg, false, prev); err != nil {
		return err
	}
	if err := t.unindexSealed(seg); err != nil {
		return err
	}
	return t.set(pendingKey(t.key[:0], key), nil, nil, false)
}

// markSegment rewrites seg's row, whose encoding is prev, sealed or pending: a seal
// makes it sealed, an expiry pending again.
func (t *txn) markSegment(seg store.Segment, sealed bool, prev []byte) error {
	seg.Sealed = sealed
	t.key = segmentKey(t.key[:0], seg.Key)
	return t.set(t.key, encodeSegment(t.enc[:0], seg), prev, true)
}

// unindexSealed removes the sealed segment seg's entries in S and W: what takes it out of
// every read, deleted (DeleteSegment) or expiring (ExpireSegment).
func (t *txn) unindexSealed(seg store.Segment) error {
	if err := t.del(sealedKey(t.key[:0], seg.ConvID, seg.LastSeq), []byte(seg.Key)); err != nil {
		return err
	}
	return t.del(sealedByTimeKey(t.key[:0], seg.ConvID, seg.LastTS, seg.LastSeq), []byte(seg.Key))
}

// hotRows reads the stored message rows of seg's range, ascending: those that are there,
// which the caller counts.
func (t *txn) hotRows(seg store.Segment) ([]hotRow, error) {
	if seg.FirstSeq > seg.LastSeq || seg.LastSeq == math.MaxInt64 {
		return nil, nil // no range a conversation can hold: a conflict
	}
	prefix := appendStr([]byte{tMessage}, seg.ConvID)
	it, err := t.iter(appendInt(slices.Clip(prefix), seg.FirstSeq), appendInt(slices.Clip(prefix), seg.LastSeq+1))
	if err != nil {
		return nil, err
	}
	var rows []hotRow // collected first: the iterator does not follow the batch's writes
	for valid := it.First(); valid; valid = it.Next() {
		m, err := iterMessage(it, prefix, seg.ConvID)
		var v []byte
		if err == nil {
			v, err = it.ValueAndErr()
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "messages of conversation %q", seg.ConvID), it.Close())
		}
		rows = append(rows, hotRow{key: bytes.Clone(it.Key()), val: bytes.Clone(v), m: m})
	}
	return rows, closeIter(it)
}

// impliedByNewest prepares the removal of convID's messages up to upTo: if the newest
// message is among them, it writes into the conversation row and its sender's member row
// what that message implied (latest), which no stored message will imply once it is gone.
func (t *txn) impliedByNewest(convID string, upTo int64) error {
	n, err := t.newest(convID)
	if err != nil || n.seq == 0 || n.seq > upTo {
		return err
	}
	c, err := t.storedConversation(convID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if now := n.conversation(c); err == nil && now != c {
		prev := slices.Clone(t.conv.val) // storedConversation leaves the row in the cache
		t.enc = encodeConversation(t.enc[:0], now)
		t.key = convKey(t.key[:0], convID)
		if err := t.set(t.key, t.enc, prev, true); err != nil {
			t.conv.valid = false
			return err
		}
		t.cacheConv(convID, t.enc)
	}
	m, err := t.storedMember(convID, n.sender)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the sender has left: nothing of theirs is implied
	}
	if err != nil {
		return err
	}
	if now := n.member(m); now != m {
		prev := slices.Clone(t.val) // storedMember leaves the row in t.val and its key in t.key
		return t.set(t.key, encodeMember(t.enc[:0], now), prev, true)
	}
	return nil
}

// DeleteSegment implements store.SegmentWriter: the row and its entries, P or S and W.
func (w writeTx) DeleteSegment(ctx context.Context, key string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	seg, found, err := t.segment(key)
	if err != nil {
		return err
	}
	if !found {
		return notFound("delete segment %q", key)
	}
	if err := t.del(t.key, t.val); err != nil { // t.key and t.val are still the row's
		return err
	}
	if !seg.Sealed {
		return t.del(pendingKey(t.key[:0], key), nil)
	}
	return t.unindexSealed(seg)
}

// PutOverlay implements store.SegmentWriter. The first overlay that recalls the message
// uncounts it as RecallMessage does (uncountRecalled); the attachment's reference key A,
// which SealSegment left, is what makes a second one count nothing, as for a hot recall.
func (w writeTx) PutOverlay(ctx context.Context, m store.Message, at int64) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = overlayKey(t.key[:0], m.ConvID, m.Seq)
	v, existed, err := t.get(t.key)
	if err != nil {
		return err
	}
	wasRecalled := false
	if existed {
		was, err := decodeMessage(v, m.ConvID, m.Seq)
		if err != nil {
			return corrupt(err, "overlay %q/%d", m.ConvID, m.Seq)
		}
		wasRecalled = was.Recalled
	}
	if err := t.set(t.key, encodeMessage(t.enc[:0], m), v, existed); err != nil {
		return err
	}
	if !m.Recalled || wasRecalled {
		return nil
	}
	return t.uncountRecalled(m, at)
}
