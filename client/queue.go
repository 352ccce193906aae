package client

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// maxQueuedBytes bounds the pushes waiting for OnEvent, counted as their data, type and
// conversation id plus the event itself. When the next push does not fit, the reader drops
// it instead of blocking (which would also hold up send replies): the dispatcher fetches
// whatever was dropped over HTTP, since the cursor makes every event re-fetchable.
//
// The bound is in bytes rather than events because what it protects is memory. It is large
// enough for a device's catch-up after a long absence (10,000 small messages take about
// 4 MiB) to queue while OnEvent works through it: the server pushes a catch-up as fast as the
// socket takes it, and with a short queue the reader would drop most of it, and the
// dispatcher fetch it all again over HTTP while the pushes go on. An empty queue holds none
// of it.
const maxQueuedBytes = 8 << 20

// keptBatchCap is the largest batch slice the dispatcher keeps for reuse: one long catch-up
// should not leave an idle client holding room for thousands of events.
const keptBatchCap = 256

// pushQueue carries pushes from the connection's reader to the dispatcher. put never blocks;
// the dispatcher takes everything queued at once.
type pushQueue struct {
	mu    sync.Mutex // guards evs and bytes
	evs   []SyncEvent
	bytes int

	ready chan struct{} // holds a token while evs may be non-empty
	// drops counts the calls to drop (written with mu held): a batch taken before the
	// latest drop is stale too.
	drops atomic.Uint64
}

func newPushQueue() *pushQueue {
	return &pushQueue{ready: make(chan struct{}, 1)}
}

// eventSize is what ev counts against maxQueuedBytes.
func eventSize(ev *SyncEvent) int {
	return int(unsafe.Sizeof(*ev)) + len(ev.Data) + len(ev.Type) + len(ev.ConvID)
}

// put queues ev, or reports false if it does not fit.
func (q *pushQueue) put(ev SyncEvent) bool {
	n := eventSize(&ev)
	q.mu.Lock()
	if q.bytes+n > maxQueuedBytes {
		q.mu.Unlock()
		return false
	}
	q.evs = append(q.evs, ev)
	q.bytes += n
	first := len(q.evs) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns every queued push, oldest first, and leaves the queue empty, reusing spare
// (a batch returned earlier, which the caller is done with) for the pushes that come next.
// mark is for dropped.
func (q *pushQueue) take(spare []SyncEvent) (batch []SyncEvent, mark uint64) {
	clear(spare[:cap(spare)]) // drop references to the data of events already delivered
	if cap(spare) > keptBatchCap {
		spare = nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	batch = q.evs
	q.evs, q.bytes = spare[:0], 0
	return batch, q.drops.Load()
}

// drop discards every queued push, and marks the batches taken so far as stale (see
// dropped).
func (q *pushQueue) drop() {
	q.mu.Lock()
	clear(q.evs)
	q.evs, q.bytes = q.evs[:0], 0
	q.drops.Add(1)
	q.mu.Unlock()
}

// dropped reports whether drop was called since take returned mark.
func (q *pushQueue) dropped(mark uint64) bool { return q.drops.Load() != mark }

// empty reports whether nothing is queued.
func (q *pushQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.evs) == 0
}
