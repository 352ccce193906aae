package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// attachmentCols is the column list of attachments, in the order scanAttachment reads it.
const attachmentCols = `id, owner_id, state, size, created_at, mime_type, sha256, width, height,
	duration_ms, thumbnail, preview, completed_at, refs, idle_since`

func scanAttachment(r sqlrow.Row) (store.Attachment, error) {
	var a store.Attachment
	err := r.Scan(&a.ID, &a.OwnerID, &a.State, &a.Size, &a.CreatedAt, &a.MimeType, &a.SHA256,
		&a.Width, &a.Height, &a.DurationMS, &a.Thumbnail, &a.Preview, &a.CompletedAt, &a.Refs, &a.IdleSince)
	return a, err
}

// Attachment implements store.AttachmentReader. In an Update it locks the row, as the
// other point reads do (see readTx.lock).
func (t readTx) Attachment(ctx context.Context, id string) (store.Attachment, error) {
	a, err := scanAttachment(t.tx.QueryRow(ctx, `SELECT `+attachmentCols+` FROM attachments WHERE id = $1`+t.lock, id))
	if err != nil {
		return store.Attachment{}, translate(err, fmt.Sprintf("attachment %q", id))
	}
	return a, nil
}

// AttachmentRefs implements store.AttachmentReader, in byte order of the conversation id:
// the hot messages by the partial index messages_by_attachment, and the sealed ones by
// sealed_refs_by_attachment, never the same message twice (sealing moves it from one to
// the other in one commit). Each side is a range of its index, cut to the limit before
// the two are merged.
func (t readTx) AttachmentRefs(ctx context.Context, id, afterConv string, afterSeq int64, limit int) ([]store.MessageRef, error) {
	return collect(ctx, t.tx, func(r sqlrow.Row) (store.MessageRef, error) {
		var ref store.MessageRef
		err := r.Scan(&ref.ConvID, &ref.Seq)
		return ref, err
	}, fmt.Sprintf("messages carrying attachment %q", id),
		`SELECT conv_id, seq FROM (
			(SELECT conv_id COLLATE "C" AS conv_id, seq FROM messages
			WHERE attachment_id = $1 AND NOT recalled AND (conv_id COLLATE "C", seq) > ($2, $3)
			ORDER BY conv_id COLLATE "C", seq LIMIT $4)
			UNION ALL
			(SELECT conv_id, seq FROM sealed_refs
			WHERE attachment_id = $1 AND (conv_id, seq) > ($2, $3)
			ORDER BY conv_id, seq LIMIT $4)) refs
		ORDER BY conv_id, seq LIMIT $4`, id, afterConv, afterSeq, max(limit, 0))
}

// AttachmentUsage implements store.AttachmentReader, by the index attachments_by_owner.
func (t readTx) AttachmentUsage(ctx context.Context, ownerID string, since int64) (int64, error) {
	var sum int64
	err := t.tx.QueryRow(ctx, `SELECT coalesce(sum(size), 0)::bigint FROM attachments
		WHERE owner_id = $1 AND created_at >= $2`, ownerID, since).Scan(&sum)
	if err != nil {
		return 0, translate(err, fmt.Sprintf("attachment usage of user %q", ownerID))
	}
	return sum, nil
}

// IdleAttachments implements store.AttachmentReader, by the partial index attachments_idle.
func (t readTx) IdleAttachments(ctx context.Context, before int64, limit int) ([]store.Attachment, error) {
	return collect(ctx, t.tx, scanAttachment, "idle attachments", `SELECT `+attachmentCols+` FROM attachments
		WHERE refs = 0 AND idle_since < $1 ORDER BY idle_since, id LIMIT $2`, before, max(limit, 0))
}

// CreateAttachment implements store.AttachmentWriter. ON CONFLICT DO NOTHING rather than a
// unique violation, which would abort the transaction: the contract lets fn go on after
// ErrExists.
func (t writeTx) CreateAttachment(ctx context.Context, a store.Attachment) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO attachments (`+attachmentCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0, $5) ON CONFLICT DO NOTHING`,
		a.ID, a.OwnerID, store.AttachmentUploading, a.Size, a.CreatedAt, a.MimeType, a.SHA256,
		a.Width, a.Height, a.DurationMS, a.Thumbnail, a.Preview, a.CompletedAt)
	return expectOne(tag, err, store.ErrExists, "create attachment %q", a.ID)
}

// CompleteAttachment implements store.AttachmentWriter.
func (t writeTx) CompleteAttachment(ctx context.Context, id string, meta store.AttachmentMeta) error {
	tag, err := t.tx.Exec(ctx, `UPDATE attachments SET state = $1, mime_type = $2, sha256 = $3,
		width = $4, height = $5, duration_ms = $6, thumbnail = $7, preview = $8, completed_at = $9
		WHERE id = $10 AND state = $11`,
		store.AttachmentComplete, meta.MimeType, meta.SHA256, meta.Width, meta.Height, meta.DurationMS,
		meta.Thumbnail, meta.Preview, meta.CompletedAt, id, store.AttachmentUploading)
	return expectOne(tag, err, store.ErrNotFound, "complete attachment %q", id)
}

// MarkAttachmentDeleting implements store.AttachmentWriter in one conditional UPDATE. At
// READ COMMITTED an UPDATE that waited for a concurrent append's lock on the row checks
// its condition again on the row that append committed, so a send that got in first keeps
// the attachment, and one that comes after finds it deleting (ErrBadAttachment).
func (t writeTx) MarkAttachmentDeleting(ctx context.Context, id string, idleBefore int64) (bool, error) {
	what := fmt.Sprintf("mark attachment %q deleting", id)
	var marked bool
	err := t.tx.QueryRow(ctx, `UPDATE attachments SET state = $1
		WHERE id = $2 AND (state = $1 OR (refs = 0 AND idle_since < $3)) RETURNING true`,
		store.AttachmentDeleting, id, idleBefore).Scan(&marked)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, translate(err, what)
	}
	if err := t.tx.QueryRow(ctx, `SELECT true FROM attachments WHERE id = $1`, id).Scan(&marked); err != nil {
		return false, translate(err, what)
	}
	return false, nil
}

// DeleteAttachment implements store.AttachmentWriter.
func (t writeTx) DeleteAttachment(ctx context.Context, id string) error {
	tag, err := t.tx.Exec(ctx, `DELETE FROM attachments WHERE id = $1`, id)
	return expectOne(tag, err, store.ErrNotFound, "delete attachment %q", id)
}
