package hub

import (
	"hash/maphash"
	"sync"
)

// Conversation watches wake the long-polls of members of read-fanout conversations (large groups): a
// message there is an event in no member's log, so nothing is published per user; the
// conversation is notified once instead (NotifyConversation), and each watch of it is woken. A wake-up carries
// nothing and coalesces: a watch woken twice before it looks is woken once. The watcher
// then reads what changed from the store (chat.Service.Sync, by the mark).

// watchShards spreads the watches of different conversations over locks, like the hub's
// shards do for users.
const watchShards = 64

type watchShard struct {
	mu      sync.Mutex
	watches map[string]map[*ConvWatch]struct{} // conversation -> its watches
}

type convWatches struct {
	seed   maphash.Seed
	shards [watchShards]watchShard
}

func (w *convWatches) shardOf(key string) *watchShard {
	return &w.shards[maphash.String(w.seed, key)%watchShards]
}

// ConvWatch is a wake-up for changes of some conversations.
type ConvWatch struct {
	w        *convWatches
	interest Interest // the hub's
	keys     []string
	c        chan struct{}
	once     sync.Once
}

// WatchConversations returns a watch of the conversations keys, woken by every later
// NotifyConversation of one. Close it when done.
func (h *Hub) WatchConversations(keys []string) *ConvWatch {
	w := &ConvWatch{w: &h.convs, interest: h.interest, keys: keys, c: make(chan struct{}, 1)}
	for _, k := range keys {
		sh := w.w.shardOf(k)
		sh.mu.Lock()
		m := sh.watches[k]
		if m == nil {
			m = make(map[*ConvWatch]struct{})
			if sh.watches == nil {
				sh.watches = make(map[string]map[*ConvWatch]struct{})
			}
			sh.watches[k] = m
			if h.interest != nil {
				h.interest.ConvWatch(k, true)
			}
		}
		m[w] = struct{}{}
		sh.mu.Unlock()
	}
	return w
}

// C receives a value after a NotifyConversation of one of the watched conversations.
func (w *ConvWatch) C() <-chan struct{} { return w.c }

// Close stops the watch. It is safe to call more than once.
func (w *ConvWatch) Close() {
	w.once.Do(func() {
		for _, k := range w.keys {
			sh := w.w.shardOf(k)
			sh.mu.Lock()
			if m := sh.watches[k]; m != nil {
				delete(m, w)
				if len(m) == 0 {
					delete(sh.watches, k)
					if w.interest != nil {
						w.interest.ConvWatch(k, false)
					}
				}
			}
			sh.mu.Unlock()
		}
	})
}

// NotifyConversation wakes every watch of conversation key. It never blocks.
func (h *Hub) NotifyConversation(key string) {
	sh := h.convs.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for w := range sh.watches[key] {
		select {
		case w.c <- struct{}{}:
		default: // woken already: coalesced
		}
	}
}
