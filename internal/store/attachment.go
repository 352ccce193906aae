package store

import "context"

// AttachmentState is where an attachment is in its life: uploading, complete (its bytes
// durable in the blob store, sendable), or being deleted by the collector.
type AttachmentState int

// The attachment states. Only a complete attachment may be sent; a deleting one is on its
// way out (its blobs may already be gone) and is never complete again.
const (
	AttachmentUploading AttachmentState = 1
	AttachmentComplete  AttachmentState = 2
	AttachmentDeleting  AttachmentState = 3
)

// Attachment is one uploaded file: who uploaded it, what the server found in its bytes, and
// how many messages carry it. The bytes are in the blob store, never here.
type Attachment struct {
	ID        string
	OwnerID   string
	State     AttachmentState
	Size      int64 // the upload's declared length, in bytes; counted against the owner's quota from creation
	CreatedAt int64 // Unix ms
	AttachmentMeta
	// Refs is the number of stored, unrecalled messages that carry the attachment. The store
	// keeps it, in the append and the recall of such a message.
	Refs int64
	// IdleSince is, while Refs is 0, the Unix ms since when no message has carried the
	// attachment (its CreatedAt until the first message does); 0 while Refs > 0. The
	// collector deletes attachments idle for long enough.
	IdleSince int64
}

// AttachmentMeta is what the server found in an attachment's bytes when its upload
// completed.
type AttachmentMeta struct {
	MimeType    string // sniffed from the bytes
	SHA256      string // lowercase hex
	Width       int    // pixels, for images and video; 0 when unknown
	Height      int
	DurationMS  int64  // for audio and video, when the container says; 0 otherwise
	Thumbnail   bool   // a thumbnail blob exists
	Preview     string // a tiny inline image (a data: URL), for images; empty otherwise
	CompletedAt int64  // Unix ms
}

// MessageRef names one message that carries an attachment.
type MessageRef struct {
	ConvID string
	Seq    int64
}

// AttachmentReader reads attachments.
type AttachmentReader interface {
	// Attachment returns the attachment, or ErrNotFound.
	Attachment(ctx context.Context, id string) (Attachment, error)
	// AttachmentRefs returns up to limit messages that carry the attachment, ordered by
	// (ConvID, Seq), after (afterConv, afterSeq): a page of them. A recalled message is
	// not among them. Empty when there are no more.
	AttachmentRefs(ctx context.Context, id, afterConv string, afterSeq int64, limit int) ([]MessageRef, error)
	// AttachmentUsage returns the sum of Size over the owner's attachments, in any state,
	// created at or after since (Unix ms): what the owner has uploaded lately, for the quota.
	AttachmentUsage(ctx context.Context, ownerID string, since int64) (int64, error)
	// IdleAttachments returns up to limit attachments with Refs 0 and IdleSince below before,
	// in any state, ordered by (IdleSince, ID): the collector's work.
	IdleAttachments(ctx context.Context, before int64, limit int) ([]Attachment, error)
}

// AttachmentWriter writes attachments. Refs and IdleSince are the store's: only the append
// and the recall of a message that carries the attachment change them, so that concurrent
// sends and recalls of one attachment on several writers count right.
type AttachmentWriter interface {
	// CreateAttachment inserts a (State AttachmentUploading, Refs 0, IdleSince a.CreatedAt,
	// whatever a says of them); ErrExists if a.ID exists.
	CreateAttachment(ctx context.Context, a Attachment) error
	// CompleteAttachment sets the attachment's meta and moves it from uploading to complete;
	// ErrNotFound if there is no such attachment or it is not uploading.
	CompleteAttachment(ctx context.Context, id string, meta AttachmentMeta) error
	// MarkAttachmentDeleting moves the attachment to AttachmentDeleting if its Refs is 0 and
	// its IdleSince is below idleBefore, as one conditional write (so that a send committed
	// meanwhile keeps it), and reports whether it did. An attachment already deleting is
	// reported true (the collector's earlier pass stopped midway). ErrNotFound if there is
	// no such attachment.
	MarkAttachmentDeleting(ctx context.Context, id string, idleBefore int64) (bool, error)
	// DeleteAttachment removes the attachment's row; ErrNotFound if there is none.
	DeleteAttachment(ctx context.Context, id string) error
}
