package postgres

import (
	"context"
	"fmt"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

const segCols = sqlrow.SegmentCols

// Segments implements store.SegmentReader, by the index segments_sealed.
func (t readTx) Segments(ctx context.Context, convID string, fromSeq int64, limit int) ([]store.Segment, error) {
	return collect(ctx, t.tx, sqlrow.Segment, fmt.Sprintf("segments of conversation %q", convID),
		`SELECT `+segCols+` FROM segments WHERE conv_id = $1 AND sealed AND last_seq >= $2
		ORDER BY last_seq LIMIT $3`, convID, fromSeq, max(limit, 0))
}

// LastSegment implements store.SegmentReader: one probe at the end of segments_sealed.
func (t readTx) LastSegment(ctx context.Context, convID string) (store.Segment, error) {
	seg, err := sqlrow.Segment(t.tx.QueryRow(ctx, `SELECT `+segCols+` FROM segments
		WHERE conv_id = $1 AND sealed ORDER BY last_seq DESC LIMIT 1`, convID))
	if err != nil {
		return store.Segment{}, translate(err, fmt.Sprintf("last segment of conversation %q", convID))
	}
	return seg, nil
}

// SegmentAtTime implements store.SegmentReader: one probe in segments_by_time.
func (t readTx) SegmentAtTime(ctx context.Context, convID string, ts int64) (store.Segment, error) {
	seg, err := sqlrow.Segment(t.tx.QueryRow(ctx, `SELECT `+segCols+` FROM segments
		WHERE conv_id = $1 AND sealed AND last_ts >= $2 ORDER BY last_ts, last_seq LIMIT 1`, convID, ts))
	if err != nil {
		return store.Segment{}, translate(err, fmt.Sprintf("segment of conversation %q at %d", convID, ts))
	}
	return seg, nil
}

// PendingSegments implements store.SegmentReader, by the partial index segments_pending.
func (t readTx) PendingSegments(ctx context.Context, limit int) ([]store.Segment, error) {
	return collect(ctx, t.tx, sqlrow.Segment, "pending segments", `SELECT `+segCols+` FROM segments
		WHERE NOT sealed ORDER BY key LIMIT $1`, max(limit, 0))
}

// Overlays implements store.SegmentReader.
func (t readTx) Overlays(ctx context.Context, convID string, from, to int64) ([]store.Message, error) {
	return collect(ctx, t.tx, scanMessage, fmt.Sprintf("overlays of conversation %q", convID),
		`SELECT `+msgCols+` FROM overlays WHERE conv_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq`,
		convID, from, to)
}

// ConversationIDs implements store.SegmentReader in byte order of the id, by the index
// conversations_by_id_bytes.
func (t readTx) ConversationIDs(ctx context.Context, after string, limit int) ([]string, error) {
	return collect(ctx, t.tx, func(r sqlrow.Row) (string, error) {
		var id string
		err := r.Scan(&id)
		return id, err
	}, fmt.Sprintf("conversation ids after %q", after), `SELECT id FROM conversations
		WHERE id COLLATE "C" > $1 ORDER BY id COLLATE "C" LIMIT $2`, after, max(limit, 0))
}

// AddSegment implements store.SegmentWriter. ON CONFLICT DO NOTHING rather than a unique
// violation, which would abort the transaction: the contract lets fn go on after ErrExists.
func (t writeTx) AddSegment(ctx context.Context, seg store.Segment) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO segments (`+segCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING`, sqlrow.SegmentArgs(seg)...)
	return expectOne(tag, err, store.ErrExists, "add segment %q", seg.Key)
}

// sealSQL removes the hot messages $2..$3 of conversation $1, keeping in sealed_refs those
// that still count in an attachment (AttachmentRefs lists them from there), and marks the
// segment $4 sealed, in one statement.
const sealSQL = `WITH d AS (
		DELETE FROM messages WHERE conv_id = $1 AND seq >= $2 AND seq <= $3
		RETURNING conv_id, seq, attachment_id, recalled),
	r AS (
		INSERT INTO sealed_refs (conv_id, seq, attachment_id)
		SELECT conv_id, seq, attachment_id FROM d WHERE attachment_id IS NOT NULL AND NOT recalled)
	UPDATE segments SET sealed = true WHERE key = $4`

// SealSegment implements store.SegmentWriter. Several nodes write at READ COMMITTED, so
// what it checks it locks, to commit: the pending segment's row (a second seal of it waits,
// then finds it sealed: ErrNotFound) and every message of the range (a recall on another
// node waits for the seal, then finds no message; one that came first is counted, the
// lock having waited for its commit). The check runs before any write, so ErrConflict
// changes nothing.
func (t writeTx) SealSegment(ctx context.Context, key string, recalled int) error {
	what := fmt.Sprintf("seal segment %q", key)
	seg, err := sqlrow.Segment(t.tx.QueryRow(ctx, `SELECT `+segCols+` FROM segments
		WHERE key = $1 AND NOT sealed FOR UPDATE`, key))
	if err != nil {
		return translate(err, what)
	}
	var stored, recalledNow int64
	err = t.tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE recalled) FROM (
		SELECT recalled FROM messages WHERE conv_id = $1 AND seq >= $2 AND seq <= $3
		ORDER BY seq FOR UPDATE) m`, seg.ConvID, seg.FirstSeq, seg.LastSeq).Scan(&stored, &recalledNow)
	if err != nil {
		return translate(err, what)
	}
	if err := sqlrow.CheckSeal(seg, stored, recalledNow, recalled); err != nil {
		return err
	}
	tag, err := t.tx.Exec(ctx, sealSQL, seg.ConvID, seg.FirstSeq, seg.LastSeq, key)
	return expectOne(tag, err, store.ErrNotFound, "%s", what)
}

// DeleteSegment implements store.SegmentWriter.
func (t writeTx) DeleteSegment(ctx context.Context, key string) error {
	tag, err := t.tx.Exec(ctx, `DELETE FROM segments WHERE key = $1`, key)
	return expectOne(tag, err, store.ErrNotFound, "delete segment %q", key)
}

// uncountSealedSQL is the uncount of a cold message's first recall: it deletes the sealed
// message's sealed_refs row and takes one from the attachment it names. At READ COMMITTED
// a second recall of the message, on this node or another, waits for the row's lock and
// then finds it gone, so it uncounts nothing.
const uncountSealedSQL = `WITH r AS (
		DELETE FROM sealed_refs WHERE conv_id = $1 AND seq = $2 RETURNING attachment_id)
	` + uncountSQL + ` WHERE id = (SELECT attachment_id FROM r)`

// expireSQL removes the hot messages through $2 of conversation $1 and uncounts, grouped
// by attachment, those not recalled that carry one, marking it idle since $3 when that
// leaves none; it returns how many messages it removed. The DELETE locks each row, so a
// recall on another node either came first (the row reads recalled: no second uncount) or
// waits and then finds no message.
const expireSQL = `WITH d AS (
		DELETE FROM messages WHERE conv_id = $1 AND seq <= $2
		RETURNING attachment_id, recalled),
	n AS (
		SELECT attachment_id, count(*) AS c FROM d
		WHERE attachment_id IS NOT NULL AND NOT recalled GROUP BY attachment_id),
	u AS (
		UPDATE attachments a SET refs = greatest(a.refs - n.c, 0),
			idle_since = CASE WHEN a.refs - n.c <= 0 THEN $3::bigint ELSE 0 END
		FROM n WHERE a.id = n.attachment_id)
	SELECT count(*) FROM d`

// ExpireMessages implements store.SegmentWriter: expireSQL, one statement.
func (t writeTx) ExpireMessages(ctx context.Context, convID string, throughSeq, at int64) (int, error) {
	var n int64
	if err := t.tx.QueryRow(ctx, expireSQL, convID, throughSeq, at).Scan(&n); err != nil {
		return 0, translate(err, fmt.Sprintf("expire messages of %q through %d", convID, throughSeq))
	}
	return int(n), nil
}

// ExpireSegment implements store.SegmentWriter. The sealed row is locked first, so that a
// second expiry of it waits and then finds it pending (ErrNotFound); each attached message
// is uncounted by uncountSealedSQL, once whoever recalled it meanwhile.
func (t writeTx) ExpireSegment(ctx context.Context, key string, attached []store.Message, at int64) error {
	what := fmt.Sprintf("expire segment %q", key)
	seg, err := sqlrow.Segment(t.tx.QueryRow(ctx, `SELECT `+segCols+` FROM segments
		WHERE key = $1 AND sealed FOR UPDATE`, key))
	if err != nil {
		return translate(err, what)
	}
	if err := store.CheckAttached(seg, attached); err != nil {
		return err
	}
	for _, m := range attached {
		if _, err := t.tx.Exec(ctx, uncountSealedSQL, m.ConvID, m.Seq, at); err != nil {
			return translate(err, what)
		}
	}
	if _, err := t.tx.Exec(ctx, `DELETE FROM overlays WHERE conv_id = $1 AND seq >= $2 AND seq <= $3`,
		seg.ConvID, seg.FirstSeq, seg.LastSeq); err != nil {
		return translate(err, what)
	}
	tag, err := t.tx.Exec(ctx, `UPDATE segments SET sealed = false WHERE key = $1`, key)
	return expectOne(tag, err, store.ErrNotFound, "%s", what)
}

// PutOverlay implements store.SegmentWriter: an upsert, then, for a recalled version,
// uncountSealedSQL.
func (t writeTx) PutOverlay(ctx context.Context, m store.Message, at int64) error {
	what := fmt.Sprintf("put overlay %q/%d", m.ConvID, m.Seq)
	_, err := t.tx.Exec(ctx, `INSERT INTO overlays (`+msgCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (conv_id, seq) DO UPDATE SET msg_id = excluded.msg_id,
		client_msg_id = excluded.client_msg_id, sender_id = excluded.sender_id,
		content_type = excluded.content_type, content = excluded.content, extra = excluded.extra,
		created_at = excluded.created_at, recalled = excluded.recalled,
		mentions = excluded.mentions, attachment_id = excluded.attachment_id`, messageArgs(m)...)
	if err != nil {
		return translate(err, what)
	}
	if !m.Recalled {
		return nil
	}
	if _, err := t.tx.Exec(ctx, uncountSealedSQL, m.ConvID, m.Seq, at); err != nil {
		return translate(err, what)
	}
	return nil
}
