package pebble

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/parleychat/parley/internal/store"
)

// Attachment rows and their three indexes (keys.go: a, U, I, A). The append that counts a
// message in an attachment's Refs runs on the writer's hot path (hot.go); everything else
// here is an ordinary read or Update.

// Attachment implements store.AttachmentReader.
func (r readTx) Attachment(ctx context.Context, id string) (store.Attachment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return store.Attachment{}, err
	}
	a, found, err := t.attachment(id)
	if err == nil && !found {
		err = notFound("attachment %q", id)
	}
	return a, err
}

// attachment reads the attachment row id; t.val is left holding its encoding.
func (t *txn) attachment(id string) (store.Attachment, bool, error) {
	t.key = attachmentKey(t.key[:0], id)
	v, found, err := t.get(t.key)
	if err != nil || !found {
		return store.Attachment{}, false, err
	}
	a, err := decodeAttachment(v, id)
	if err != nil {
		return store.Attachment{}, false, corrupt(err, "attachment %q", id)
	}
	return a, true, nil
}

// AttachmentRefs implements store.AttachmentReader.
func (r readTx) AttachmentRefs(ctx context.Context, id, afterConv string, afterSeq int64, limit int) ([]store.MessageRef, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	prefix := appendStr([]byte{tAttachmentRef}, id)
	// The smallest key after (afterConv, afterSeq)'s: keys under the prefix are never
	// extensions of one another, so appending a byte steps past that one alone.
	lower := append(msgRef(slices.Clip(prefix), afterConv, afterSeq), 0)
	it, err := t.iter(lower, prefixEnd(prefix))
	if err != nil {
		return nil, err
	}
	var out []store.MessageRef
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		conv, seq, err := readMsgRef(it.Key()[len(prefix):])
		if err != nil {
			return nil, errors.Join(corrupt(err, "references of attachment %q", id), it.Close())
		}
		out = append(out, store.MessageRef{ConvID: conv, Seq: seq})
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	return out, nil
}

// AttachmentUsage implements store.AttachmentReader: a scan of the owner's usage index from
// since on, which holds each attachment's size.
func (r readTx) AttachmentUsage(ctx context.Context, ownerID string, since int64) (int64, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	prefix := appendStr([]byte{tAttachmentUsage}, ownerID)
	it, err := t.iter(appendInt(slices.Clip(prefix), since), prefixEnd(prefix))
	if err != nil {
		return 0, err
	}
	var sum int64
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		var size int64
		if err == nil {
			d := decoder{b: v}
			size = d.varint()
			err = d.done()
		}
		if err != nil {
			return 0, errors.Join(corrupt(err, "attachment usage of %q", ownerID), it.Close())
		}
		sum += size
	}
	return sum, closeIter(it)
}

// IdleAttachments implements store.AttachmentReader: a scan of the idle index below before,
// then each row.
func (r readTx) IdleAttachments(ctx context.Context, before int64, limit int) ([]store.Attachment, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	it, err := t.iter([]byte{tAttachmentIdle}, appendInt([]byte{tAttachmentIdle}, before))
	if err != nil {
		return nil, err
	}
	var ids []string
	for valid := it.First(); valid && len(ids) < limit; valid = it.Next() {
		_, rest, err := readInt(it.Key()[1:])
		var id string
		if err == nil {
			id, rest, err = readStr(rest)
		}
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "idle attachments"), it.Close())
		}
		ids = append(ids, id)
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	out := make([]store.Attachment, 0, len(ids))
	for _, id := range ids {
		a, found, err := t.attachment(id)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, corrupt(errCorrupt, "idle attachment %q: index without row", id)
		}
		out = append(out, a)
	}
	return out, nil
}

// CreateAttachment implements store.AttachmentWriter: the row, its usage entry, and its
// idle entry (Refs is 0).
func (w writeTx) CreateAttachment(ctx context.Context, a store.Attachment) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = attachmentKey(t.key[:0], a.ID)
	if found, err := t.exists(t.key); err != nil || found {
		if err == nil {
			err = exists("create attachment %q", a.ID)
		}
		return err
	}
	a.State, a.Refs, a.IdleSince = store.AttachmentUploading, 0, a.CreatedAt
	if err := t.set(t.key, encodeAttachment(t.enc[:0], a), nil, false); err != nil {
		return err
	}
	t.enc = appendVarint(t.enc[:0], a.Size)
	if err := t.set(attachmentUsageKey(t.key[:0], a.OwnerID, a.CreatedAt, a.ID), t.enc, nil, false); err != nil {
		return err
	}
	return t.set(attachmentIdleKey(t.key[:0], a.IdleSince, a.ID), nil, nil, false)
}

// CompleteAttachment implements store.AttachmentWriter.
func (w writeTx) CompleteAttachment(ctx context.Context, id string, meta store.AttachmentMeta) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	a, found, err := t.attachment(id)
	if err != nil {
		return err
	}
	if !found || a.State != store.AttachmentUploading {
		return notFound("complete attachment %q: none uploading", id)
	}
	a.State, a.AttachmentMeta = store.AttachmentComplete, meta
	return t.setAttachment(a, t.val)
}

// MarkAttachmentDeleting implements store.AttachmentWriter. The writer runs one request at
// a time, so the read and the write are one conditional step.
func (w writeTx) MarkAttachmentDeleting(ctx context.Context, id string, idleBefore int64) (bool, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return false, err
	}
	a, found, err := t.attachment(id)
	switch {
	case err != nil:
		return false, err
	case !found:
		return false, notFound("mark attachment %q deleting", id)
	case a.State == store.AttachmentDeleting:
		return true, nil
	case a.Refs != 0 || a.IdleSince >= idleBefore:
		return false, nil
	}
	a.State = store.AttachmentDeleting
	return true, t.setAttachment(a, t.val)
}

// DeleteAttachment implements store.AttachmentWriter: the row and every index entry of it.
// An attachment is normally deleted idle, without references; any left are removed too, so
// that none outlives its row.
func (w writeTx) DeleteAttachment(ctx context.Context, id string) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	a, found, err := t.attachment(id)
	if err != nil {
		return err
	}
	if !found {
		return notFound("delete attachment %q", id)
	}
	if err := t.del(t.key, t.val); err != nil { // t.key and t.val are still the row's
		return err
	}
	t.enc = appendVarint(t.enc[:0], a.Size)
	if err := t.del(attachmentUsageKey(t.key[:0], a.OwnerID, a.CreatedAt, a.ID), t.enc); err != nil {
		return err
	}
	if a.Refs == 0 {
		if err := t.del(attachmentIdleKey(t.key[:0], a.IdleSince, a.ID), nil); err != nil {
			return err
		}
	}
	prefix := appendStr([]byte{tAttachmentRef}, id)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return err
	}
	var refs [][]byte // collected first: the iterator does not follow the batch's writes
	for valid := it.First(); valid; valid = it.Next() {
		refs = append(refs, bytes.Clone(it.Key()))
	}
	if err := closeIter(it); err != nil {
		return err
	}
	for _, k := range refs {
		if err := t.del(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// setAttachment rewrites attachment a's row, which held prev (t.val, say: it reads
// nothing).
func (t *txn) setAttachment(a store.Attachment, prev []byte) error {
	t.key = attachmentKey(t.key[:0], a.ID)
	return t.set(t.key, encodeAttachment(t.enc[:0], a), prev, true)
}

// uncount takes the recalled message (conv, seq) out of attachment id's references, if an
// append counted it there: one less in Refs and, when none are left, idle since at.
func (t *txn) uncount(id, conv string, seq, at int64) error {
	ref := attachmentRefKey(nil, id, conv, seq)
	if found, err := t.exists(ref); err != nil || !found {
		return err // InsertMessage counts nothing, and a recall uncounts once
	}
	if err := t.del(ref, nil); err != nil {
		return err
	}
	a, found, err := t.attachment(id)
	if err != nil || !found {
		return err // deleted with its references (DeleteAttachment): nothing to count
	}
	if a.Refs <= 0 {
		return corrupt(errCorrupt, "attachment %q: a reference without a count", id)
	}
	a.Refs--
	if a.Refs == 0 {
		a.IdleSince = at
		if err := t.set(attachmentIdleKey(t.key[:0], at, id), nil, nil, false); err != nil {
			return err
		}
	}
	return t.setAttachment(a, t.val) // t.val is still the row's
}
