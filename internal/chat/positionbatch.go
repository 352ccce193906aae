package chat

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// positionBatch coalesces the read and delivered updates of read-fanout conversations and
// writes them in batches: one store transaction applies every update pending, and each
// caller answers once the batch holding its update has committed, so a position
// acknowledged is durable (docs/design.md, "Large groups"). In a large group thousands of
// members may read at once after a message; one commit each would be the read storm the
// design warns of. Updates of one member that wait together are coalesced in memory: the
// largest asked wins, since a position only moves forward.
//
// One goroutine, started when the first update arrives and ending when none waits, writes
// the batches in turn; updates arriving while one commits wait for the next. The first
// batch after a quiet spell goes at once; later ones linger up to positionLinger for more
// to arrive (or until positionBatchFull wait), which keeps the commits per update low when
// the updates come in a stream rather than all at once.
//
// It stays in chat rather than internal/live: it is the durable write path of positions,
// not their delivery. Each caller's answer waits for the batch's commit, and the commit
// applies chat's position rules (clamped to max_seq, never backwards, a "read" event in
// the reader's log, ErrNotFound for a member who left) inside chat's transaction.
type positionBatch struct {
	mu      sync.Mutex // guards the fields below
	pending map[memberKey]*pendingPosition
	order   []*pendingPosition // pending, in arrival order
	running bool               // the writing goroutine runs
	full    chan struct{}      // closed when pending reaches positionBatchFull during a linger
}

// memberKey names one member of one conversation.
type memberKey struct{ convID, userID string }

// pendingPosition is one member's coalesced update, shared by the callers that asked for it
// while it waited.
type pendingPosition struct {
	memberKey
	read, delivered int64 // the largest asked; a read asks for delivered too

	done  chan struct{} // closed once committed (or failed): the fields below are set
	after store.Member  // the member as the batch left it
	moved bool          // the batch moved a position
	err   error
}

const (
	// positionLinger is how long a batch after the first of a busy spell waits for more.
	positionLinger = 2 * time.Millisecond
	// positionBatchFull ends a linger early; a batch takes at most positionBatchMax.
	positionBatchFull = 512
	positionBatchMax  = 4096
)

func newPositionBatch() *positionBatch {
	return &positionBatch{pending: make(map[memberKey]*pendingPosition)}
}

// advanceBatched moves userID's position p in the read-fanout conversation convID to seq
// (clamped to max_seq, never backwards) in the next batch, and returns the position after
// that batch committed.
func (s *Service) advanceBatched(ctx context.Context, convID, userID string, seq int64, p position) (int64, error) {
	pp := s.positions.add(s, memberKey{convID, userID}, seq, p)
	select {
	case <-pp.done:
	case <-ctx.Done():
		return 0, s.storeErr("position", ctx.Err()) // the update may still be applied, as a request lost in flight
	}
	if pp.err != nil {
		return 0, pp.err
	}
	if pp.moved && p == readPos {
		countEvents(ctx, 1) // the caller's share of the batch: its "read" event
	}
	if p == readPos {
		return pp.after.ReadSeq, nil
	}
	return pp.after.DeliveredSeq, nil
}

// add queues the update and starts the writer if it is not running.
func (b *positionBatch) add(s *Service, k memberKey, seq int64, p position) *pendingPosition {
	b.mu.Lock()
	defer b.mu.Unlock()
	pp := b.pending[k]
	if pp == nil {
		pp = &pendingPosition{memberKey: k, done: make(chan struct{})}
		b.pending[k] = pp
		b.order = append(b.order, pp)
		if b.full != nil && len(b.order) >= positionBatchFull {
			close(b.full)
			b.full = nil
		}
	}
	pp.delivered = max(pp.delivered, seq)
	if p == readPos {
		pp.read = max(pp.read, seq)
	}
	if !b.running {
		b.running = true
		if !s.bg.Go(func(ctx context.Context) { b.run(ctx, s) }) {
			b.failAll(ErrClosed) // closed: no writer will come
		}
	}
	return pp
}

// failAll answers every waiting update with err and empties the batch; b.mu is held.
func (b *positionBatch) failAll(err error) {
	for _, pp := range b.order {
		pp.err = err
		close(pp.done)
	}
	b.order, b.running = nil, false
	clear(b.pending)
}

// run writes batches until none waits.
func (b *positionBatch) run(ctx context.Context, s *Service) {
	for first := true; ; first = false {
		batch := b.take(!first)
		if batch == nil {
			return
		}
		s.commitPositions(ctx, batch)
	}
}

// take returns the next batch, after a linger if asked; nil (and the writer stops) when
// nothing waits.
func (b *positionBatch) take(linger bool) []*pendingPosition {
	b.mu.Lock()
	if linger && len(b.order) > 0 && len(b.order) < positionBatchFull {
		full := make(chan struct{})
		b.full = full
		b.mu.Unlock()
		t := time.NewTimer(positionLinger)
		select {
		case <-full:
		case <-t.C:
		}
		t.Stop()
		b.mu.Lock()
		b.full = nil
	}
	defer b.mu.Unlock()
	if len(b.order) == 0 {
		b.running = false
		return nil
	}
	n := min(len(b.order), positionBatchMax)
	batch := b.order[:n:n]
	b.order = b.order[n:]
	for _, pp := range batch {
		delete(b.pending, pp.memberKey)
	}
	if len(b.order) == 0 {
		b.order = nil // let the backing array go
	}
	return batch
}

// commitPositions applies batch in one store transaction, each update as advance would:
// max(old, min(asked, max_seq)), a "read" event to the reader's own log when the read
// position moves (a read-fanout conversation is a group: nobody else is told). A member
// who left meanwhile gets its own ErrNotFound; a store failure fails the whole batch.
//
// ctx is the Service's lifetime, not a caller's: the batch is shared by callers with
// contexts of their own, and each stops waiting on its own.
func (s *Service) commitPositions(ctx context.Context, batch []*pendingPosition) {
	err := s.update(ctx, "position", func(tx store.Tx, ob *outbox) error {
		convs := make(map[string]store.Conversation)
		for _, pp := range batch {
			pp.moved, pp.err = false, nil // fn may run again: start from scratch
			if err := s.applyPosition(ctx, tx, ob, convs, pp); err != nil {
				return err
			}
		}
		return nil
	})
	for _, pp := range batch {
		if err != nil {
			pp.err = err
		} else if pp.moved {
			s.positionsMoved(pp.convID, pp.userID, pp.after.ReadSeq, pp.after.DeliveredSeq)
		}
		close(pp.done)
	}
}

// applyPosition applies one coalesced update inside commitPositions' transaction. It
// returns only the errors that fail the whole batch.
func (s *Service) applyPosition(ctx context.Context, tx store.Tx, ob *outbox, convs map[string]store.Conversation, pp *pendingPosition) error {
	c, ok := convs[pp.convID]
	if !ok {
		var err error
		if c, err = loadConv(ctx, tx, pp.convID); errors.Is(err, ErrNotFound) {
			pp.err = err
			return nil
		} else if err != nil {
			return err
		}
		convs[pp.convID] = c
	}
	m, err := loadMember(ctx, tx, pp.convID, pp.userID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			pp.err = err
			return nil
		}
		return err
	}
	read := max(m.ReadSeq, min(pp.read, c.MaxSeq))
	delivered := max(m.DeliveredSeq, read, min(pp.delivered, c.MaxSeq))
	after, moved, err := tx.AdvancePositions(ctx, pp.convID, pp.userID, read, delivered)
	if err != nil {
		return err
	}
	pp.after, pp.moved = after, moved
	if moved && after.ReadSeq > m.ReadSeq {
		return s.emitPosition(ctx, tx, ob, c, pp.userID, after.ReadSeq, readPos)
	}
	return nil
}
