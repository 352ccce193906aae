package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// The rules of attachments: who may upload how much, who may see one, and what a message
// that carries one stores. The bytes and the tus protocol are internal/attach's; the rows
// are the store's, whose append counts each message that carries an attachment (store.Attachment).

// quotaWindow is the span of the upload quota: Config.UploadQuota bytes per user per day.
const quotaWindow = 24 * time.Hour

// errNoAttachment is the answer for an attachment that does not exist and, word for word,
// for one the caller may not see: a stranger must not learn which ids exist.
var errNoAttachment = notFound("no such attachment")

// errBadAttachment answers a send whose content names an attachment that is unknown, not
// the sender's, or not completely uploaded. Unlike a download's 404 it may say so: the
// sender learns nothing of other users' uploads from it.
var errBadAttachment = invalid("content.attachment_id names no complete upload of yours")

// attachmentContent checks the content of a message that carries an attachment (content
// types 2 to 5) and returns it as it is stored: with content.attachment set to the
// attachment's metadata, replacing anything the client put there, so that every reader
// lays the message out without another request; and the attachment's id. The store checks
// the attachment again in the append, atomically (store.ErrBadAttachment): this read only
// gives a clear error early and the metadata to embed.
func (s *Service) attachmentContent(ctx context.Context, me Identity, content []byte, extraLen int) ([]byte, string, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(content, &fields) != nil || fields == nil {
		return nil, "", invalid("content of an attachment message must be a JSON object")
	}
	var c protocol.AttachmentContent
	if err := json.Unmarshal(content, &c); err != nil {
		return nil, "", invalid("content: attachment_id, name and caption must be strings")
	}
	switch {
	case !protocol.ValidAttachmentID(c.AttachmentID):
		return nil, "", invalid("content.attachment_id is missing or malformed: it is the id of an upload (a_ and 26 characters)")
	case len(c.Name) > protocol.MaxAttachmentName:
		return nil, "", invalid("content.name is longer than %d bytes", protocol.MaxAttachmentName)
	case len(c.Caption) > protocol.MaxCaption:
		return nil, "", invalid("content.caption is longer than %d bytes", protocol.MaxCaption)
	}
	a, err := s.OwnUpload(ctx, me, c.AttachmentID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, "", errBadAttachment
	case err != nil:
		return nil, "", err
	case a.State != store.AttachmentComplete:
		return nil, "", errBadAttachment
	}
	meta, err := json.Marshal(AttachmentWire(a))
	if err != nil {
		return nil, "", err
	}
	fields["attachment"] = meta
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the client's text as it wrote it, not grown sixfold by \u003c
	if err := enc.Encode(fields); err != nil {
		return nil, "", err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out)+extraLen > protocol.MaxContentBytes {
		return nil, "", fmt.Errorf("%w: content plus extra exceed %d bytes with the attachment's metadata (%d bytes) added",
			ErrTooLarge, protocol.MaxContentBytes, len(meta))
	}
	return out, c.AttachmentID, nil
}

// NewAttachmentID returns a fresh attachment id.
func NewAttachmentID() string { return newID("a_") }

// MaxUploadSize is the largest upload the service accepts, in bytes.
func (s *Service) MaxUploadSize() int64 { return s.cfg.MaxUploadSize }

// CreateUpload records a new upload of size bytes by me under id (NewAttachmentID), after
// checking the size against MaxUploadSize (ErrTooLarge) and the bytes me uploaded in the
// last day against the quota (ErrQuota). The quota counts an upload from its creation,
// whole, so that starting uploads cannot get round it.
func (s *Service) CreateUpload(ctx context.Context, me Identity, id string, size int64) error {
	switch {
	case size < 0:
		return invalid("Upload-Length must be given")
	case size > s.cfg.MaxUploadSize:
		return fmt.Errorf("%w: uploads are at most %d bytes", ErrTooLarge, s.cfg.MaxUploadSize)
	}
	now := s.nowMS()
	return s.update(ctx, "create upload", func(tx store.Tx, _ *outbox) error {
		used, err := tx.AttachmentUsage(ctx, me.UserID, now-quotaWindow.Milliseconds())
		if err != nil {
			return err
		}
		if used+size > s.cfg.UploadQuota {
			return fmt.Errorf("%w: the upload quota of %d bytes a day is used up (%d bytes in the last 24 hours)",
				ErrQuota, s.cfg.UploadQuota, used)
		}
		return tx.CreateAttachment(ctx, store.Attachment{
			ID: id, OwnerID: me.UserID, State: store.AttachmentUploading, Size: size, CreatedAt: now, IdleSince: now,
		})
	})
}

// OwnUpload returns the attachment id if me uploaded it; errNoAttachment otherwise.
func (s *Service) OwnUpload(ctx context.Context, me Identity, id string) (store.Attachment, error) {
	var a store.Attachment
	err := s.view(ctx, "read upload", func(tx store.ReadTx) error {
		var err error
		a, err = s.readAttachment(ctx, tx, id)
		if err == nil && a.OwnerID != me.UserID {
			err = errNoAttachment
		}
		return err
	})
	return a, err
}

// CompleteUpload records what the server found in an upload's bytes, now durable in the
// blob store: from here on the attachment may be sent. ErrNotFound when it is not
// uploading (completed already, or collected).
func (s *Service) CompleteUpload(ctx context.Context, id string, meta store.AttachmentMeta) error {
	meta.CompletedAt = s.nowMS()
	return s.update(ctx, "complete upload", func(tx store.Tx, _ *outbox) error {
		err := tx.CompleteAttachment(ctx, id, meta)
		if errors.Is(err, store.ErrNotFound) {
			return errNoAttachment
		}
		return err
	})
}

// Attachment returns the attachment id if me may see it: me uploaded it, or me is a member
// of a conversation with an unrecalled message that carries it, sent after me joined and
// after what me cleared. Anyone else gets errNoAttachment, as for an unknown id.
func (s *Service) Attachment(ctx context.Context, me Identity, id string) (store.Attachment, error) {
	var a store.Attachment
	err := s.view(ctx, "read attachment", func(tx store.ReadTx) error {
		var err error
		if a, err = s.readAttachment(ctx, tx, id); err != nil {
			return err
		}
		if a.OwnerID == me.UserID {
			return nil
		}
		ok, err := seesRef(ctx, tx, me.UserID, id)
		if err == nil && !ok {
			err = errNoAttachment
		}
		return err
	})
	return a, err
}

// refsPage is how many of an attachment's messages seesRef reads at a time.
const refsPage = 200

// seesRef reports whether user can see one of the messages that carry attachment id. It
// reads the refs page by page and the user's membership once per conversation, so a file
// forwarded into many conversations costs a scan of them, never of their members.
func seesRef(ctx context.Context, tx store.ReadTx, user, id string) (bool, error) {
	afterConv, afterSeq := "", int64(0)
	lastConv, member := "", (*store.Member)(nil)
	for {
		refs, err := tx.AttachmentRefs(ctx, id, afterConv, afterSeq, refsPage)
		if err != nil || len(refs) == 0 {
			return false, err
		}
		for _, r := range refs {
			if r.ConvID != lastConv {
				lastConv, member = r.ConvID, nil
				mem, err := tx.Member(ctx, r.ConvID, user)
				switch {
				case err == nil:
					member = &mem
				case !errors.Is(err, store.ErrNotFound):
					return false, err
				}
			}
			if member != nil && r.Seq > visibleFrom(*member) {
				return true, nil
			}
		}
		last := refs[len(refs)-1]
		afterConv, afterSeq = last.ConvID, last.Seq
	}
}

func (s *Service) readAttachment(ctx context.Context, tx store.ReadTx, id string) (store.Attachment, error) {
	if !protocol.ValidAttachmentID(id) {
		return store.Attachment{}, errNoAttachment
	}
	a, err := tx.Attachment(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && a.State == store.AttachmentDeleting {
		return store.Attachment{}, errNoAttachment
	}
	return a, err
}

// IdleAttachments returns up to limit attachments that no message has carried since
// before: the collector's work (internal/attach).
func (s *Service) IdleAttachments(ctx context.Context, before time.Time, limit int) ([]store.Attachment, error) {
	var out []store.Attachment
	err := s.view(ctx, "idle attachments", func(tx store.ReadTx) error {
		var err error
		out, err = tx.IdleAttachments(ctx, before.UnixMilli(), limit)
		return err
	})
	return out, err
}

// StartDeletingAttachment marks attachment id as being deleted if it is still idle since
// before, and reports whether it is: from then on no message can carry it and nobody can
// download it, so its blobs may go. A send that committed meanwhile keeps it.
func (s *Service) StartDeletingAttachment(ctx context.Context, id string, before time.Time) (bool, error) {
	var ok bool
	err := s.update(ctx, "mark attachment deleting", func(tx store.Tx, _ *outbox) error {
		var err error
		ok, err = tx.MarkAttachmentDeleting(ctx, id, before.UnixMilli())
		if errors.Is(err, store.ErrNotFound) {
			ok, err = false, nil
		}
		return err
	})
	return ok, err
}

// FinishDeletingAttachment removes the row of an attachment whose blobs are gone.
func (s *Service) FinishDeletingAttachment(ctx context.Context, id string) error {
	return s.update(ctx, "delete attachment", func(tx store.Tx, _ *outbox) error {
		if err := tx.DeleteAttachment(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
}

// AttachmentWire is a's wire form.
func AttachmentWire(a store.Attachment) protocol.Attachment {
	return protocol.Attachment{
		ID: a.ID, Complete: a.State == store.AttachmentComplete, MimeType: a.MimeType, Size: a.Size,
		SHA256: a.SHA256, Width: a.Width, Height: a.Height, DurationMS: a.DurationMS,
		Thumbnail: a.Thumbnail, Preview: a.Preview, CreatedAt: a.CreatedAt,
	}
}

// AttachmentRow returns attachment id whoever asks: for a signed URL, whose signature is the
// permission (internal/attach checks it first).
func (s *Service) AttachmentRow(ctx context.Context, id string) (store.Attachment, error) {
	var a store.Attachment
	err := s.view(ctx, "read attachment", func(tx store.ReadTx) error {
		var err error
		a, err = s.readAttachment(ctx, tx, id)
		return err
	})
	return a, err
}
