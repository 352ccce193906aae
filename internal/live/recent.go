package live

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// Recent keeps the newest messages of each active read-fanout conversation in
// memory, so that the history pulls a large group's message sets off (every online member
// fetching it) are answered without reading the messages from the store. It holds
// committed messages only: a send adds its message after the commit, a recall drops the
// conversation. Sends commit in seq order but may add their messages in another order, so
// a conversation's window is served only up to its highest seq below which nothing is
// missing, and only when the conversation's max_seq (read in the caller's snapshot) is
// within it.
type Recent struct {
	mu    sync.Mutex
	convs map[string]*recentConv
	// drops counts the drops (recalls): a message read before one may be the version it
	// changed, so an add whose epoch (the count when its reading began) is older is refused.
	drops atomic.Uint64
	// onHold, if set (on one of several nodes), is told when a conversation is held and when
	// it no longer is, so that the node hears of recalls on the others (cluster.go). It is
	// called with mu held.
	onHold func(convID string, on bool)
	// ttl, if not zero (on one of several nodes), is how long a conversation is served
	// after it was first held: a recall on another node whose bus message was lost is then
	// seen when it is read again from the store. Zero serves it until dropped.
	ttl time.Duration
}

// recentPerConv is how many messages a conversation keeps (the design's "last 200").
const recentPerConv = 200

// maxRecentConvs bounds how many conversations are held; past it arbitrary ones go.
const maxRecentConvs = 1024

type recentConv struct {
	made time.Time // for Recent.ttl
	msgs map[int64]store.Message
	low  int64 // the lowest seq held; the window is low..high
	high int64 // every seq in low..high is held
}

// NewRecent returns an empty window. onHold, if not nil (on one of several nodes), is told
// when a conversation is held and when it no longer is; ttl, if not zero, is how long a
// conversation is served after it was first held (the fields of the same names).
func NewRecent(onHold func(convID string, on bool), ttl time.Duration) *Recent {
	return &Recent{convs: make(map[string]*recentConv), onHold: onHold, ttl: ttl}
}

// Epoch returns the value to pass to Add for messages about to be read or committed.
func (r *Recent) Epoch() uint64 { return r.drops.Load() } // no lock: every send asks

// Add records a committed message of a read-fanout conversation, read or committed since
// epoch. A conversation not held starts with it, and is then served only from its seq on.
// If a drop came since epoch, the message may be stale: the conversation is dropped again.
func (r *Recent) Add(m store.Message, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if epoch != r.drops.Load() {
		r.deleteLocked(m.ConvID)
		return
	}
	c := r.convs[m.ConvID]
	if c == nil {
		if len(r.convs) >= maxRecentConvs {
			for id := range r.convs {
				r.deleteLocked(id)
				break
			}
		}
		c = &recentConv{made: time.Now(), msgs: make(map[int64]store.Message), low: m.Seq, high: m.Seq - 1}
		r.convs[m.ConvID] = c
		if r.onHold != nil {
			r.onHold(m.ConvID, true)
		}
	}
	if m.Seq < c.low {
		return // older than the window: the store has it
	}
	c.msgs[m.Seq] = m
	for {
		if _, ok := c.msgs[c.high+1]; !ok {
			break
		}
		c.high++
	}
	for c.high-c.low+1 > recentPerConv {
		delete(c.msgs, c.low)
		c.low++
	}
}

// Drop forgets a conversation (a message of it changed).
func (r *Recent) Drop(convID string) {
	r.mu.Lock()
	r.deleteLocked(convID)
	r.drops.Add(1)
	r.mu.Unlock()
}

// deleteLocked forgets convID, if held. r.mu must be held.
func (r *Recent) deleteLocked(convID string) {
	if _, ok := r.convs[convID]; !ok {
		return
	}
	delete(r.convs, convID)
	if r.onHold != nil {
		r.onHold(convID, false)
	}
}

// Page returns the messages of convID that chat.Service.History answers for a page after
// afterSeq or, if beforeSeq > 0, below beforeSeq, of at most limit messages (ascending, and
// whether there are more), visible above floor, for a conversation whose newest seq is
// maxSeq; ok is false unless the window holds all of them. Every seq from 1 to max_seq is a
// stored message (messages are never deleted; a recall keeps the row), so the page's bounds are
// arithmetic, as the store would find them.
func (r *Recent) Page(convID string, maxSeq, floor, afterSeq, beforeSeq int64, limit int) (ms []store.Message, hasMore, ok bool) {
	lower, upper := max(afterSeq, floor)+1, maxSeq
	if beforeSeq > 0 {
		lower, upper = floor+1, min(beforeSeq-1, maxSeq)
	}
	if upper-lower+1 > int64(limit) {
		hasMore = true
		if beforeSeq > 0 {
			lower = upper - int64(limit) + 1 // the newest of the range
		} else {
			upper = lower + int64(limit) - 1
		}
	}
	if lower > upper {
		return []store.Message{}, false, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.convs[convID]
	if c != nil && r.ttl > 0 && time.Since(c.made) > r.ttl {
		r.deleteLocked(convID)
		return nil, false, false
	}
	if c == nil || maxSeq > c.high || lower < c.low {
		return nil, false, false
	}
	ms = make([]store.Message, 0, upper-lower+1)
	for seq := lower; seq <= upper; seq++ {
		ms = append(ms, c.msgs[seq])
	}
	return ms, hasMore, true
}
