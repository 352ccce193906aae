package gateway

import (
	"sync"

	"github.com/parleychat/parley/internal/hub"
)

// replyQueue is a connection's replies waiting for the writer, in the order they were queued.
// Its slice exists only while replies wait (hub.Queue): a channel would hold its whole buffer
// (896 bytes for 32 replies) on every idle connection.
type replyQueue struct {
	mu    sync.Mutex // guards items and room
	items hub.Queue[[]byte]
	room  chan struct{} // made by put while it waits for room; closed by take
}

// maxReplies is how many replies a connection may have queued and not yet taken by the
// writer. Replies queue only while the writer is busy (a client that does not read blocks
// it). Past this many, the reader and the answerer of the sends in flight wait for room,
// which holds the client back through TCP; a client that never reads is closed by the
// writer's deadline.
const maxReplies = 32

// put queues b, waiting while maxReplies replies wait, until done is closed: it reports
// whether b was queued.
func (q *replyQueue) put(b []byte, done <-chan struct{}) bool {
	q.mu.Lock()
	for q.items.Len() >= maxReplies {
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
	q.items.Push(b)
	q.mu.Unlock()
	return true
}

// take returns the replies waiting, or nil if there are none, as hub.Queue.Take does, and
// lets a put waiting for room go on.
func (q *replyQueue) take(spare [][]byte) [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	return q.items.Take(spare)
}
