package sqlite

import (
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// Attachment implements store.AttachmentReader.
func (t readTx) Attachment(ctx context.Context, id string) (store.Attachment, error) {
	a, err := scanAttachment(t.q.queryRow(ctx, stAttachment, id))
	if err != nil {
		return store.Attachment{}, t.q.fail(err, "attachment %q", id)
	}
	return a, nil
}

// AttachmentRefs implements store.AttachmentReader, by the partial index
// messages_by_attachment, which holds only unrecalled messages that carry an attachment.
func (t readTx) AttachmentRefs(ctx context.Context, id, afterConv string, afterSeq int64, limit int) ([]store.MessageRef, error) {
	return queryAll(ctx, t.q, scanMessageRef, stAttachmentRefs, []any{id, afterConv, afterSeq, max(limit, 0)},
		"messages carrying attachment %q", id)
}

// AttachmentUsage implements store.AttachmentReader, from the index attachments_by_owner
// alone.
func (t readTx) AttachmentUsage(ctx context.Context, ownerID string, since int64) (int64, error) {
	var sum int64
	if err := t.q.queryRow(ctx, stAttachmentUsage, ownerID, since).Scan(&sum); err != nil {
		return 0, t.q.fail(err, "attachment usage of user %q", ownerID)
	}
	return sum, nil
}

// IdleAttachments implements store.AttachmentReader, by the partial index attachments_idle.
func (t readTx) IdleAttachments(ctx context.Context, before int64, limit int) ([]store.Attachment, error) {
	return queryAll(ctx, t.q, scanAttachment, stIdleAttachments, []any{before, max(limit, 0)},
		"attachments idle before %d", before)
}

// CreateAttachment implements store.AttachmentWriter.
func (t writeTx) CreateAttachment(ctx context.Context, a store.Attachment) error {
	_, err := t.q.exec(ctx, stCreateAttachment, a.ID, a.OwnerID, store.AttachmentUploading, a.Size,
		a.CreatedAt, a.MimeType, a.SHA256, a.Width, a.Height, a.DurationMS, a.Thumbnail, a.Preview,
		a.CompletedAt, 0, a.CreatedAt)
	if err != nil {
		return t.q.fail(err, "create attachment %q", a.ID)
	}
	return nil
}

// CompleteAttachment implements store.AttachmentWriter.
func (t writeTx) CompleteAttachment(ctx context.Context, id string, m store.AttachmentMeta) error {
	res, err := t.q.exec(ctx, stCompleteAttachment, store.AttachmentComplete, m.MimeType, m.SHA256,
		m.Width, m.Height, m.DurationMS, m.Thumbnail, m.Preview, m.CompletedAt, id, store.AttachmentUploading)
	return t.expectOne(res, err, "complete attachment %q", id)
}

// MarkAttachmentDeleting implements store.AttachmentWriter: one conditional UPDATE; only
// when it matches nothing does a second read tell "not idle" from "no such attachment".
func (t writeTx) MarkAttachmentDeleting(ctx context.Context, id string, idleBefore int64) (bool, error) {
	res, err := t.q.exec(ctx, stMarkAttachmentDeleting, store.AttachmentDeleting, id, idleBefore)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n > 0 {
			return true, nil
		}
	}
	if err != nil {
		return false, t.q.fail(err, "mark attachment %q deleting", id)
	}
	var one int
	if err := t.q.queryRow(ctx, stAttachmentExists, id).Scan(&one); err != nil {
		return false, t.q.fail(err, "mark attachment %q deleting", id)
	}
	return false, nil
}

// DeleteAttachment implements store.AttachmentWriter.
func (t writeTx) DeleteAttachment(ctx context.Context, id string) error {
	res, err := t.q.exec(ctx, stDeleteAttachment, id)
	return t.expectOne(res, err, "delete attachment %q", id)
}

// loadAttachment is the attachment row of store.AppendView: nil when there is none.
func (t writeTx) loadAttachment(ctx context.Context, id string) (*store.Attachment, error) {
	a, err := t.Attachment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return &a, nil
}

// countAttachment writes store.AppendPlan.Attachment as the increment the plan describes.
func (t writeTx) countAttachment(ctx context.Context, a *store.Attachment) error {
	res, err := t.q.exec(ctx, stAddAttachmentRef, a.ID)
	return t.expectOne(res, err, "count a message in attachment %q", a.ID)
}

// scanAttachment reads attCols.
func scanAttachment(r rowScanner) (store.Attachment, error) {
	var a store.Attachment
	err := r.Scan(&a.ID, &a.OwnerID, &a.State, &a.Size, &a.CreatedAt, &a.MimeType, &a.SHA256,
		&a.Width, &a.Height, &a.DurationMS, &a.Thumbnail, &a.Preview, &a.CompletedAt, &a.Refs, &a.IdleSince)
	return a, err
}

// scanMessageRef reads conv_id, seq.
func scanMessageRef(r rowScanner) (store.MessageRef, error) {
	var ref store.MessageRef
	err := r.Scan(&ref.ConvID, &ref.Seq)
	return ref, err
}
