package gateway

import "sync"

// replyQueue is a connection's replies waiting for the writer, in the order they were queued.
// Its slice exists only while replies wait: a channel would hold its whole buffer (896 bytes
// for 32 replies) on every idle connection.
type replyQueue struct {
	mu    sync.Mutex // guards items and room
	items [][]byte   // nil while there are none
	room  chan struct{}
}

// maxReplies is how many replies a connection may have queued and not yet taken by the
// writer. Replies queue only while the writer is busy (a client that does not read blocks
// it). Past this many, the reader disconnects the client rather than queue the reply of a
// frame it served; the answerer of the sends in flight waits for room instead, which holds
// the reader back through the bound of sends in flight (inflight.go).
const maxReplies = 32

// tryPut queues b unless maxReplies replies wait already.
func (q *replyQueue) tryPut(b []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxReplies {
		return false
	}
	q.items = append(q.items, b)
	return true
}

// put queues b, waiting while maxReplies replies wait, until done is closed: it reports
// whether b was queued.
func (q *replyQueue) put(b []byte, done <-chan struct{}) bool {
	q.mu.Lock()
	for len(q.items) >= maxReplies {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		}
		q.mu.Lock()
	}
	q.items = append(q.items, b)
	q.mu.Unlock()
	return true
}

// take returns the replies waiting, or nil if there are none, and keeps spare, emptied, to
// queue the next ones in, as hub.Subscription.Take does: when none wait, it keeps no slice.
func (q *replyQueue) take(spare [][]byte) [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	out := q.items
	if len(out) == 0 {
		q.items = nil
		return nil
	}
	q.items = spare[:0]
	return out
}
