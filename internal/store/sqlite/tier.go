package sqlite

import (
	"context"
	"fmt"

	"github.com/parleychat/parley/internal/store"
)

// errNoTier is what every method of the cold tier returns on this engine until it has
// the tier's tables: ErrUnavailable, so that a caller treats the tier as down rather than
// empty, and the conformance suite skips the tier's tests here.
var errNoTier = fmt.Errorf("%w: the cold tier is not implemented on this engine yet", store.ErrUnavailable)

// Segments is not implemented yet (errNoTier).
func (t readTx) Segments(ctx context.Context, convID string, fromSeq int64, limit int) ([]store.Segment, error) {
	return nil, errNoTier
}

// LastSegment is not implemented yet (errNoTier).
func (t readTx) LastSegment(ctx context.Context, convID string) (store.Segment, error) {
	return store.Segment{}, errNoTier
}

// SegmentAtTime is not implemented yet (errNoTier).
func (t readTx) SegmentAtTime(ctx context.Context, convID string, ts int64) (store.Segment, error) {
	return store.Segment{}, errNoTier
}

// PendingSegments is not implemented yet (errNoTier).
func (t readTx) PendingSegments(ctx context.Context, limit int) ([]store.Segment, error) {
	return nil, errNoTier
}

// Overlays is not implemented yet (errNoTier).
func (t readTx) Overlays(ctx context.Context, convID string, from, to int64) ([]store.Message, error) {
	return nil, errNoTier
}

// ConversationIDs is not implemented yet (errNoTier).
func (t readTx) ConversationIDs(ctx context.Context, after string, limit int) ([]string, error) {
	return nil, errNoTier
}

// AddSegment is not implemented yet (errNoTier).
func (t writeTx) AddSegment(ctx context.Context, seg store.Segment) error { return errNoTier }

// SealSegment is not implemented yet (errNoTier).
func (t writeTx) SealSegment(ctx context.Context, key string, recalled int) error { return errNoTier }

// DeleteSegment is not implemented yet (errNoTier).
func (t writeTx) DeleteSegment(ctx context.Context, key string) error { return errNoTier }

// PutOverlay is not implemented yet (errNoTier).
func (t writeTx) PutOverlay(ctx context.Context, m store.Message, at int64) error { return errNoTier }
