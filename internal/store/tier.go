package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrConflict: SealSegment found the hot messages of the segment changed since the segment
// was written (one is missing, or was recalled meanwhile). Nothing was changed; the caller
// drops the segment and seals it again from what is stored now.
var ErrConflict = errors.New("store: changed since read")

// Segment is one entry of the cold tier's index: a run FirstSeq..LastSeq of one
// conversation's messages, sealed into an immutable compressed blob under Key in the blob
// store (docs/design.md, "History tiers"). The segments of a conversation are contiguous
// and never overlap: a conversation's messages at or below its last sealed segment's LastSeq
// are cold, those above it hot.
//
// A segment is added pending (Sealed false) before its blob is written, so that a crash at
// any step leaves no blob that the index does not name; SealSegment then removes the hot
// copies and marks it sealed, in one commit. Reads see sealed segments only.
type Segment struct {
	ConvID    string
	FirstSeq  int64
	LastSeq   int64
	FirstTS   int64  // CreatedAt of the message FirstSeq, Unix ms
	LastTS    int64  // CreatedAt of the message LastSeq
	Key       string // the blob's key; unique across the store
	Count     int    // messages in the blob: LastSeq-FirstSeq+1
	Bytes     int64  // the blob's size, compressed
	RawBytes  int64  // the messages' encoded size before compression
	CreatedAt int64  // Unix ms of AddSegment
	Sealed    bool
}

// SegmentReader reads the cold tier's index and overlay.
type SegmentReader interface {
	// Segments returns up to limit sealed segments of convID with LastSeq >= fromSeq,
	// ascending; empty when there are none.
	Segments(ctx context.Context, convID string, fromSeq int64, limit int) ([]Segment, error)
	// LastSegment returns convID's sealed segment with the highest LastSeq, or ErrNotFound
	// when none is sealed: its LastSeq is where the hot messages begin.
	LastSegment(ctx context.Context, convID string) (Segment, error)
	// SegmentAtTime returns convID's first sealed segment with LastTS >= ts, or ErrNotFound
	// when every sealed message is older (or none is sealed). The time index of cold
	// messages: one lookup, not a scan.
	SegmentAtTime(ctx context.Context, convID string, ts int64) (Segment, error)
	// PendingSegments returns up to limit segments that are not sealed, of any
	// conversation, ordered by Key: what a crashed tiering pass left.
	PendingSegments(ctx context.Context, limit int) ([]Segment, error)
	// Overlays returns the overlay messages of convID with from <= seq <= to, ascending by
	// seq: the current version of each cold message that changed after it was sealed.
	Overlays(ctx context.Context, convID string, from, to int64) ([]Message, error)
	// ConversationIDs returns up to limit conversation ids above after, ascending: a page
	// of every conversation, for the tiering pass.
	ConversationIDs(ctx context.Context, after string, limit int) ([]string, error)
}

// SegmentWriter writes the cold tier's index and overlay.
type SegmentWriter interface {
	// AddSegment records seg as pending (its Sealed is ignored). ErrExists if seg.Key is
	// taken.
	AddSegment(ctx context.Context, seg Segment) error
	// SealSegment seals the pending segment under key: it removes the hot messages
	// FirstSeq..LastSeq of its conversation (rows and client-id index entries; a message's
	// attachment stays counted and AttachmentRefs keeps listing it) and marks the segment
	// sealed, in the caller's commit. ErrConflict, changing nothing, unless every one of
	// those messages is stored hot and exactly recalled of them are recalled (a recall is
	// the only change to a stored message, and it never goes back). ErrNotFound if there
	// is no pending segment under key.
	SealSegment(ctx context.Context, key string, recalled int) error
	// DeleteSegment removes the index entry under key, pending or sealed; ErrNotFound if
	// there is none. The caller deletes the blob (before, for a sealed segment, only once
	// its messages are gone for good: retention).
	DeleteSegment(ctx context.Context, key string) error
	// ExpireMessages is retention's removal of convID's hot messages with seq <= throughSeq:
	// their rows and client-id index entries go, and each one not recalled that carries an
	// attachment is uncounted as RecallMessage would (Refs, IdleSince at at,
	// AttachmentRefs), in the caller's commit. It returns how many messages it removed; none
	// is no error. The conversation's MaxSeq and every position stay: seqs are never
	// reused, what is gone is a prefix.
	ExpireMessages(ctx context.Context, convID string, throughSeq, at int64) (int, error)
	// ExpireSegment is retention's first step on the sealed segment under key: the
	// segment goes back to pending (out of every read; PendingSegments lists it, so that the
	// caller or, after a crash, the next pass deletes its blob and then its entry), its
	// overlay FirstSeq..LastSeq is removed, and each message of attached that still counts
	// in its attachment is uncounted as a recall would, all in the caller's commit.
	// attached lists the segment's messages that carry an attachment, as its blob holds
	// them: only the blob knows which do, and an uncount is made once whoever asks again.
	// ErrNotFound if no sealed segment is under key.
	ExpireSegment(ctx context.Context, key string, attached []Message, at int64) error
	// PutOverlay stores m as the current version of the cold message (m.ConvID, m.Seq),
	// replacing an earlier overlay of it. When m is recalled and no earlier overlay of it
	// was, it uncounts m.AttachmentID as RecallMessage would (Refs, IdleSince at at,
	// AttachmentRefs), so that two recalls of one cold message, even on two nodes at once,
	// uncount it once.
	PutOverlay(ctx context.Context, m Message, at int64) error
}

// SearchMessageAt is MessageReader.MessageAt written once over a backend's reads: a binary
// search with point reads over the conversation's hot messages. It relies on two rules:
// the hot messages are a gapless run of seqs ending at the conversation's MaxSeq (what
// tiering and retention take away is always below them), and no message is older than the
// one before it (DecideAppend). So it costs O(log n) point reads, without an index by time.
func SearchMessageAt(ctx context.Context, r interface {
	ConversationReader
	MessageReader
}, convID string, ts int64) (int64, error) {
	c, err := r.Conversation(ctx, convID)
	if err != nil {
		return 0, err
	}
	first, err := r.Messages(ctx, convID, MessageRange{Limit: 1})
	if err != nil {
		return 0, err
	}
	if len(first) == 0 {
		return 0, ErrNotFound
	}
	if first[0].CreatedAt >= ts {
		return first[0].Seq, nil
	}
	// The answer is the smallest seq in (lo, hi] whose message is at or after ts, or none
	// (hi+1); the message at lo is older than ts.
	lo, hi := first[0].Seq, c.MaxSeq+1
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		m, err := r.Message(ctx, convID, mid)
		if err != nil {
			return 0, err
		}
		if m.CreatedAt >= ts {
			hi = mid
		} else {
			lo = mid
		}
	}
	if hi > c.MaxSeq {
		return 0, ErrNotFound
	}
	return hi, nil
}

// HotTx is implemented by a ReadTx that also reads the cold tier (the tier package's
// wrapper): Hot returns the engine's own transaction, whose reads never leave the hot store.
type HotTx interface {
	Hot() ReadTx
}

// HotOnly returns the reads of tx that stay in the hot store: tx itself unless it also
// reads the cold tier. Snapshots use it, so that a client's start costs the same however
// old its conversations are.
func HotOnly(tx ReadTx) ReadTx {
	if h, ok := tx.(HotTx); ok {
		return h.Hot()
	}
	return tx
}

// CheckAttached is ExpireSegment's check of its argument, written once for every backend:
// each attached message must be one of seg's own and carry an attachment, so that a
// caller's mistake uncounts nothing of another conversation's. It runs before any write.
func CheckAttached(seg Segment, attached []Message) error {
	for _, m := range attached {
		if m.ConvID != seg.ConvID || m.Seq < seg.FirstSeq || m.Seq > seg.LastSeq || m.AttachmentID == "" {
			return fmt.Errorf("store: expire segment %q: message %q/%d is not one of its own with an attachment", seg.Key, m.ConvID, m.Seq)
		}
	}
	return nil
}
