package pebble

import (
	"context"
	"fmt"

	"github.com/parleychat/parley/internal/store"
)

// The cold tier's index and overlay are not built on Pebble on this branch: these stubs
// keep it compiling until the Pebble implementation (branch h-tier-pebble) replaces this
// file. Each fails with ErrUnavailable, which callers already treat as "try later".

var errTierStub = fmt.Errorf("pebble: cold tier not implemented: %w", store.ErrUnavailable)

// Segments implements store.SegmentReader (stub).
func (t readTx) Segments(context.Context, string, int64, int) ([]store.Segment, error) {
	return nil, errTierStub
}

// LastSegment implements store.SegmentReader (stub).
func (t readTx) LastSegment(context.Context, string) (store.Segment, error) {
	return store.Segment{}, errTierStub
}

// SegmentAtTime implements store.SegmentReader (stub).
func (t readTx) SegmentAtTime(context.Context, string, int64) (store.Segment, error) {
	return store.Segment{}, errTierStub
}

// PendingSegments implements store.SegmentReader (stub).
func (t readTx) PendingSegments(context.Context, int) ([]store.Segment, error) {
	return nil, errTierStub
}

// Overlays implements store.SegmentReader (stub).
func (t readTx) Overlays(context.Context, string, int64, int64) ([]store.Message, error) {
	return nil, errTierStub
}

// ConversationIDs implements store.SegmentReader (stub).
func (t readTx) ConversationIDs(context.Context, string, int) ([]string, error) {
	return nil, errTierStub
}

// AddSegment implements store.SegmentWriter (stub).
func (t writeTx) AddSegment(context.Context, store.Segment) error { return errTierStub }

// SealSegment implements store.SegmentWriter (stub).
func (t writeTx) SealSegment(context.Context, string, int) error { return errTierStub }

// DeleteSegment implements store.SegmentWriter (stub).
func (t writeTx) DeleteSegment(context.Context, string) error { return errTierStub }

// PutOverlay implements store.SegmentWriter (stub).
func (t writeTx) PutOverlay(context.Context, store.Message, int64) error { return errTierStub }
