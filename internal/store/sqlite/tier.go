package sqlite

import (
	"context"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// Segments implements store.SegmentReader, by the index segments_sealed.
func (t readTx) Segments(ctx context.Context, convID string, fromSeq int64, limit int) ([]store.Segment, error) {
	return queryAll(ctx, t.q, sqlrow.Segment, stSegments, []any{convID, fromSeq, max(limit, 0)},
		"segments of conversation %q", convID)
}

// LastSegment implements store.SegmentReader: one seek at the end of segments_sealed.
func (t readTx) LastSegment(ctx context.Context, convID string) (store.Segment, error) {
	seg, err := sqlrow.Segment(t.q.queryRow(ctx, stLastSegment, convID))
	if err != nil {
		return store.Segment{}, t.q.fail(err, "last segment of conversation %q", convID)
	}
	return seg, nil
}

// SegmentAtTime implements store.SegmentReader: one seek in segments_by_time.
func (t readTx) SegmentAtTime(ctx context.Context, convID string, ts int64) (store.Segment, error) {
	seg, err := sqlrow.Segment(t.q.queryRow(ctx, stSegmentAtTime, convID, ts))
	if err != nil {
		return store.Segment{}, t.q.fail(err, "segment of conversation %q at %d", convID, ts)
	}
	return seg, nil
}

// PendingSegments implements store.SegmentReader, by the partial index segments_pending.
func (t readTx) PendingSegments(ctx context.Context, limit int) ([]store.Segment, error) {
	return queryAll(ctx, t.q, sqlrow.Segment, stPendingSegments, []any{max(limit, 0)}, "pending segments")
}

// Overlays implements store.SegmentReader.
func (t readTx) Overlays(ctx context.Context, convID string, from, to int64) ([]store.Message, error) {
	return queryAll(ctx, t.q, scanMessage, stOverlays, []any{convID, from, to},
		"overlays of conversation %q", convID)
}

// ConversationIDs implements store.SegmentReader, in the order of the primary key (BINARY:
// byte order, as the other engines order ids).
func (t readTx) ConversationIDs(ctx context.Context, after string, limit int) ([]string, error) {
	return queryAll(ctx, t.q, func(r rowScanner) (string, error) {
		var id string
		err := r.Scan(&id)
		return id, err
	}, stConversationIDs, []any{after, max(limit, 0)}, "conversation ids after %q", after)
}

// AddSegment implements store.SegmentWriter: the primary key refuses a key taken.
func (t writeTx) AddSegment(ctx context.Context, seg store.Segment) error {
	if _, err := t.q.exec(ctx, stAddSegment, sqlrow.SegmentArgs(seg)...); err != nil {
		return t.q.fail(err, "add segment %q", seg.Key)
	}
	return nil
}

// SealSegment implements store.SegmentWriter. The single writer makes the check and the
// writes after it one step: no recall can come between them. The check comes first, so
// that ErrConflict leaves everything as it was; then the messages that still count in an
// attachment are kept in sealed_refs (AttachmentRefs), and the rows go, their
// (sender_id, client_msg_id) keys with them.
func (t writeTx) SealSegment(ctx context.Context, key string, recalled int) error {
	seg, err := sqlrow.Segment(t.q.queryRow(ctx, stPendingSegment, key))
	if err != nil {
		return t.q.fail(err, "seal segment %q", key)
	}
	var stored, recalledNow int64
	if err := t.q.queryRow(ctx, stSealCheck, seg.ConvID, seg.FirstSeq, seg.LastSeq).Scan(&stored, &recalledNow); err != nil {
		return t.q.fail(err, "seal segment %q", key)
	}
	if err := sqlrow.CheckSeal(seg, stored, recalledNow, recalled); err != nil {
		return err
	}
	for _, id := range []stmtID{stSealRefs, stSealDelete} {
		if _, err := t.q.exec(ctx, id, seg.ConvID, seg.FirstSeq, seg.LastSeq); err != nil {
			return t.q.fail(err, "seal segment %q", key)
		}
	}
	res, err := t.q.exec(ctx, stSealMark, key)
	return t.expectOne(res, err, "seal segment %q", key)
}

// DeleteSegment implements store.SegmentWriter.
func (t writeTx) DeleteSegment(ctx context.Context, key string) error {
	res, err := t.q.exec(ctx, stDeleteSegment, key)
	return t.expectOne(res, err, "delete segment %q", key)
}

// ExpireMessages implements store.SegmentWriter: the uncount of the range, then its rows
// (their (sender_id, client_msg_id) keys with them), one step under the single writer.
func (t writeTx) ExpireMessages(ctx context.Context, convID string, throughSeq, at int64) (int, error) {
	if _, err := t.q.exec(ctx, stExpireUncount, at, convID, throughSeq); err != nil {
		return 0, t.q.fail(err, "expire messages of %q through %d", convID, throughSeq)
	}
	res, err := t.q.exec(ctx, stExpireDelete, convID, throughSeq)
	if err != nil {
		return 0, t.q.fail(err, "expire messages of %q through %d", convID, throughSeq)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, t.q.fail(err, "expire messages of %q through %d", convID, throughSeq)
	}
	return int(n), nil
}

// ExpireSegment implements store.SegmentWriter: each attached message uncounted as a cold
// recall uncounts it (stDropSealedRef, once: its sealed_refs row goes with it), the
// overlay of the range deleted, and the row marked pending.
func (t writeTx) ExpireSegment(ctx context.Context, key string, attached []store.Message, at int64) error {
	seg, err := sqlrow.Segment(t.q.queryRow(ctx, stSealedSegment, key))
	if err != nil {
		return t.q.fail(err, "expire segment %q", key)
	}
	if err := store.CheckAttached(seg, attached); err != nil {
		return err
	}
	for _, m := range attached {
		if _, err := t.q.exec(ctx, stDropSealedRef, at, m.ConvID, m.Seq); err != nil {
			return t.q.fail(err, "expire segment %q", key)
		}
		if _, err := t.q.exec(ctx, stDeleteSealedRef, m.ConvID, m.Seq); err != nil {
			return t.q.fail(err, "expire segment %q", key)
		}
	}
	if _, err := t.q.exec(ctx, stExpireOverlays, seg.ConvID, seg.FirstSeq, seg.LastSeq); err != nil {
		return t.q.fail(err, "expire segment %q", key)
	}
	res, err := t.q.exec(ctx, stUnseal, key)
	return t.expectOne(res, err, "expire segment %q", key)
}

// PutOverlay implements store.SegmentWriter. A recalled version uncounts the attachment
// that sealed_refs holds for the message and removes that row, as RecallMessage does for
// a hot one (the same statement, on the other table): the row is there until the first
// recall only, so a second recall uncounts nothing.
func (t writeTx) PutOverlay(ctx context.Context, m store.Message, at int64) error {
	if _, err := t.q.exec(ctx, stPutOverlay, messageArgs(m)...); err != nil {
		return t.q.fail(err, "put overlay %q/%d", m.ConvID, m.Seq)
	}
	if !m.Recalled {
		return nil
	}
	if _, err := t.q.exec(ctx, stDropSealedRef, at, m.ConvID, m.Seq); err != nil {
		return t.q.fail(err, "uncount the attachment of cold message %q/%d", m.ConvID, m.Seq)
	}
	if _, err := t.q.exec(ctx, stDeleteSealedRef, m.ConvID, m.Seq); err != nil {
		return t.q.fail(err, "uncount the attachment of cold message %q/%d", m.ConvID, m.Seq)
	}
	return nil
}
