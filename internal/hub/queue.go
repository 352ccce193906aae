package hub

import "slices"

// Queue holds values waiting for a consumer, in the order they came, in a slice that exists
// only while values wait: a consumer that is idle most of the time (a WebSocket connection)
// holds none, where a buffered channel holds its whole buffer for as long as it exists. It
// is not safe for concurrent use: its owner guards it with a lock.
type Queue[T any] struct{ items []T }

// Len returns how many values wait.
func (q *Queue[T]) Len() int { return len(q.items) }

// Grow makes room for n more values: a queue that is empty gets exactly that much.
func (q *Queue[T]) Grow(n int) { q.items = slices.Grow(q.items, n) }

// Push adds v after the values waiting.
func (q *Queue[T]) Push(v T) { q.items = append(q.items, v) }

// Take returns the values waiting, or nil if there are none, and keeps spare, emptied, to
// hold the next ones: a consumer that hands back the slice it took last (cleared, so as not
// to keep its values alive) allocates nothing while busy. When none wait the queue keeps no
// slice at all, and spare is dropped, so that an idle consumer holds none.
func (q *Queue[T]) Take(spare []T) []T {
	out := q.items
	if len(out) == 0 {
		q.items = nil
		return nil
	}
	q.items = spare[:0]
	return out
}
