package pebble

import (
	"bytes"
	"cmp"
	"errors"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/parleychat/parley/internal/store"
)

// freshKeys holds every dedup key (sender, client_msg_id) that may still be only in
// Pebble's memtables, so that the question every send asks, "was this key ever stored?",
// is answered without searching them. A memtable is a skiplist of everything written
// lately, and a lookup of an absent key there costs some 35 cache misses (about 9 µs per
// send, measured, with 300,000 entries); the sstables answer it from their bloom filters.
// So a key is looked up here, then in the sstables alone (IterOptions
// OnlyReadGuaranteedDurable skips the memtables).
//
// The writer adds each key when it writes it into a batch (before the commit: a key seen
// early only sends its send down the slow path) and, now and then, rotates the memtable
// (DB.AsyncFlush) once the batches before it have committed; when that flush has ended,
// their keys are in sstables and leave the set. Open flushes what the WAL replay put in
// the memtables, so that no key is in a memtable without being here.
type freshKeys struct {
	mu      sync.RWMutex
	keys    map[string]struct{}
	batches []freshBatch // the keys of each batch, oldest first
	cur     []string     // the keys of the batch being built
	epoch   int64        // counts removals: a check is valid only within one epoch
	rotate  int          // rotateAt, or a test's smaller figure

	// The writer's flush in flight: when done closes, the keys of batches up to upTo are
	// in sstables.
	done <-chan struct{}
	upTo int64
}

type freshBatch struct {
	n    int64
	keys []string
}

// rotateAt is how many keys the set holds before the writer rotates the memtable: some
// 30 MiB of keys, and a rotation every few seconds at the fastest.
const rotateAt = 1 << 18

func newFreshKeys(rotate int) *freshKeys {
	return &freshKeys{keys: make(map[string]struct{}), rotate: cmp.Or(rotate, rotateAt)}
}

// add records a key written into the batch being built.
func (f *freshKeys) add(key string) {
	f.mu.Lock()
	f.keys[key] = struct{}{}
	f.mu.Unlock()
	f.cur = append(f.cur, key)
}

// has reports whether key is in the set, and the epoch of the answer.
func (f *freshKeys) has(key string) (bool, int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.keys[key]
	return ok, f.epoch
}

// seal files the keys of batch n.
func (f *freshKeys) seal(n int64) {
	if len(f.cur) > 0 {
		f.batches = append(f.batches, freshBatch{n: n, keys: f.cur})
		f.cur = nil
	}
}

// maintain runs on the writer between batches, last being the last batch sealed: it
// retires the keys of a flush that has ended, and when the set is large starts one, after
// waiting (settle) until every batch up to last has committed, so that all their keys are
// in the memtables the flush takes.
func (f *freshKeys) maintain(db *pebble.DB, last int64, settle func()) {
	if f.done != nil {
		select {
		case <-f.done:
			f.retire(f.upTo)
			f.done = nil
		default:
			return
		}
	}
	if len(f.keys) >= f.rotate {
		settle()
		done, err := db.AsyncFlush()
		if err == nil {
			f.done, f.upTo = done, last
		}
	}
}

// retire removes the keys of batches up to n.
func (f *freshKeys) retire(n int64) {
	i := 0
	for i < len(f.batches) && f.batches[i].n <= n {
		i++
	}
	if i == 0 {
		return
	}
	f.mu.Lock()
	for _, b := range f.batches[:i] {
		for _, k := range b.keys {
			delete(f.keys, k)
		}
	}
	f.epoch++
	f.mu.Unlock()
	clear(f.batches[:i])
	f.batches = f.batches[i:]
}

// stored looks key up in the sstables alone, through their bloom filters.
func stored(db *pebble.DB, key []byte) (bool, error) {
	it, err := db.NewIter(&pebble.IterOptions{OnlyReadGuaranteedDurable: true, UseL6Filters: true})
	if err != nil {
		return false, err
	}
	found := it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key)
	return found, errors.Join(it.Close())
}

// precheck is what an AppendMessage's caller learned of its dedup key before queueing.
type precheck struct {
	epoch int64 // of freshKeys when it looked
	found bool  // in the set or in an sstable
	ok    bool  // false: no check was made
}

// precheck looks m's dedup key up in the fresh set, then in the sstables. It says nothing
// of keys written after it looked; the writer, which sees every key of every batch in the
// set, answers for those. A key found is not an answer either (the original may not be
// durable yet, or an Update that wrote it failed): the writer reads it again.
func (s *Store) precheck(m store.Message) precheck {
	if !s.enter() {
		return precheck{}
	}
	defer s.views.Done()
	key := clientIDKey(nil, m.SenderID, m.ClientMsgID)
	fresh, epoch := s.w.hot.fresh.has(string(key))
	if fresh {
		return precheck{epoch: epoch, found: true, ok: true}
	}
	found, err := stored(s.db, key)
	if err != nil {
		return precheck{}
	}
	return precheck{epoch: epoch, found: found, ok: true}
}
