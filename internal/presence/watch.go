package presence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ErrTooMany is returned by Watch when a watcher would follow more than MaxSubscriptions.
var ErrTooMany = errors.New("presence: too many subscriptions")

// Watcher is one connection's subscription to the presence of a bounded set of users. It
// holds the set and the changes not yet taken; the connection's writer takes them (Take)
// after notify, which the tracker calls at most once per turn.
//
// A subscription costs about 6 bytes: the watcher holds the numbers of the users it
// follows, sorted and stored as varint deltas (1 or 2 bytes each while the numbers are
// dense), and each user the numbers of its watchers (a watcherSet, 4 bytes each); no user
// id string is kept per subscription. The list is decoded whole, at most
// MaxSubscriptions numbers, only when it changes or the watcher closes; delivery reads
// the users' side alone.
type Watcher struct {
	t      *Tracker
	notify func()
	// Guarded by t.mu:
	num     uint32 // this watcher's number while it follows anyone, else 0
	count   uint32 // how many users it follows
	users   []byte // their numbers, sorted, as the uvarint deltas of appendDeltas
	pending []Entry
}

// NewWatcher returns a watcher that follows nobody; notify is called, with the tracker's
// lock held, when changes wait, and must not block.
func (t *Tracker) NewWatcher(notify func()) *Watcher {
	return &Watcher{t: t, notify: notify}
}

// followed returns the numbers of the users w follows, sorted. Lock should be held.
func (w *Watcher) followed() []uint32 {
	nums := make([]uint32, 0, w.count)
	var n uint32
	for b := w.users; len(b) > 0; {
		d, k := binary.Uvarint(b)
		n += uint32(d)
		nums = append(nums, n)
		b = b[k:]
	}
	return nums
}

// setFollowed makes nums (sorted, unique) the users w follows, encoded at their exact
// length. Lock should be held.
func (w *Watcher) setFollowed(nums []uint32) {
	w.count = uint32(len(nums))
	if len(nums) == 0 {
		w.users = nil
		return
	}
	size, prev := 0, uint32(0)
	for _, n := range nums {
		size += uvarintLen(uint64(n - prev))
		prev = n
	}
	b := make([]byte, 0, size)
	prev = 0
	for _, n := range nums {
		b = binary.AppendUvarint(b, uint64(n-prev))
		prev = n
	}
	w.users = b
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// Watch makes w follow users (replacing its set when replace is set, else adding to it)
// and returns their current entries, in the order given. It returns ErrTooMany, and
// changes nothing, if w would follow more than MaxSubscriptions.
func (w *Watcher) Watch(users []string, replace bool) ([]Entry, error) {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	var had []uint32
	n := len(users)
	if !replace {
		had = w.followed()
		n = len(had)
		for _, id := range users {
			if u := t.users[id]; u == nil || !contains(had, u.num) {
				n++
			}
		}
	}
	if n > t.cfg.MaxSubscriptions {
		return nil, fmt.Errorf("%w: at most %d users", ErrTooMany, t.cfg.MaxSubscriptions)
	}
	if replace {
		w.dropLocked()
	}
	now := t.now()
	out := make([]Entry, 0, len(users))
	var added []uint32
	for _, id := range users {
		u := t.userLocked(id)
		if u.num == 0 {
			u.num = t.userNums.assign(u)
		}
		if !contains(had, u.num) {
			added = append(added, u.num)
		}
		e := t.entryLocked(u.id, u, now)
		if !u.hidden && u.shown != e.State && u.shownAt.IsZero() {
			u.shown = e.State // nobody was watching: this is the first state handed out
		}
		out = append(out, t.shownEntryLocked(u.id, u))
	}
	w.addLocked(had, added)
	return out, nil
}

// contains reports whether sorted holds n.
func contains(sorted []uint32, n uint32) bool {
	_, ok := slices.BinarySearch(sorted, n)
	return ok
}

// addLocked makes w, which follows the users numbered had, follow the users numbered
// added too (not in had, maybe repeated). Lock should be held.
func (w *Watcher) addLocked(had, added []uint32) {
	if len(added) == 0 {
		return
	}
	slices.Sort(added)
	added = slices.Compact(added)
	if w.num == 0 {
		w.num = w.t.watcherNums.assign(w)
	}
	for _, n := range added {
		w.t.userNums.get(n).watchers.add(w.num)
	}
	merged := make([]uint32, 0, len(had)+len(added))
	for len(had) > 0 && len(added) > 0 {
		if had[0] < added[0] {
			merged, had = append(merged, had[0]), had[1:]
		} else {
			merged, added = append(merged, added[0]), added[1:]
		}
	}
	w.setFollowed(append(append(merged, had...), added...))
}

// shownEntryLocked is the entry watchers were last handed for the user: a change not yet
// due is not shown to a new watcher either, so that every watcher sees the same.
func (t *Tracker) shownEntryLocked(id string, u *user) Entry {
	if u.hidden {
		return Entry{UserID: id}
	}
	e := Entry{UserID: id, State: u.shown}
	if u.shown != Online {
		e.LastActive = u.last
	}
	return e
}

// Unwatch makes w follow none of users.
func (w *Watcher) Unwatch(users []string) {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	had := w.followed()
	n := len(had)
	for _, id := range users {
		u := t.users[id]
		if u == nil || u.num == 0 {
			continue
		}
		if i, ok := slices.BinarySearch(had, u.num); ok {
			had = slices.Delete(had, i, i+1)
			t.unwatchLocked(u, w)
		}
	}
	if len(had) == n {
		return
	}
	w.setFollowed(had) // before dropLocked, which would unwatch the old list again
	if len(had) == 0 {
		w.dropLocked() // gives the number back
	}
}

// Close ends w: it follows nobody and is handed nothing more.
func (w *Watcher) Close() {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	w.dropLocked()
	w.pending = nil
}

// Waiting reports whether changes wait for w to take them.
func (w *Watcher) Waiting() bool {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	return len(w.pending) > 0
}

// Len returns how many users w follows.
func (w *Watcher) Len() int {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	return int(w.count)
}

// dropLocked makes w follow nobody. Each user's removal costs at most manyWatchers steps
// (watcherSet), so that a watcher's close is bounded by MaxSubscriptions of them however
// many others watch the same users. Lock should be held.
func (w *Watcher) dropLocked() {
	for _, n := range w.followed() {
		w.t.unwatchLocked(w.t.userNums.get(n), w)
	}
	w.setFollowed(nil)
	if w.num != 0 {
		w.t.watcherNums.release(w.num)
		w.num = 0
	}
}

// unwatchLocked takes w from u's watchers; a user nobody watches gives its number back.
// Lock should be held.
func (t *Tracker) unwatchLocked(u *user, w *Watcher) {
	u.watchers.remove(w.num)
	if u.watchers.len() == 0 {
		t.userNums.release(u.num)
		u.num = 0
		t.forgetLocked(u.id, u)
	}
}

// handLocked queues b for w and notifies it. Lock should be held.
func (w *Watcher) handLocked(b []Entry) {
	if w.num == 0 {
		return // closed
	}
	w.pending = append(w.pending, b...)
	w.notify()
}

// Take returns the changes waiting for w, or nil: one batch, at most one entry per user
// per turn.
func (w *Watcher) Take() []Entry {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

// numbering gives things dense uint32 numbers, from 1, reusing the numbers given back,
// so that a subscription can name a user or a watcher in 4 bytes. It is guarded by the
// tracker's lock.
type numbering[T comparable] struct {
	byNum []T // number -> thing; [0] is never given
	free  []uint32
}

func (s *numbering[T]) assign(v T) uint32 {
	if len(s.byNum) == 0 {
		s.byNum = append(s.byNum, *new(T))
	}
	if k := len(s.free); k > 0 {
		n := s.free[k-1]
		s.free = s.free[:k-1]
		s.byNum[n] = v
		return n
	}
	s.byNum = append(s.byNum, v)
	return uint32(len(s.byNum) - 1)
}

func (s *numbering[T]) get(n uint32) T { return s.byNum[n] }

func (s *numbering[T]) release(n uint32) {
	var zero T
	s.byNum[n] = zero
	s.free = append(s.free, n)
}

// manyWatchers is how many watchers a user holds in a slice, found by a scan on removal;
// a user with more (someone thousands follow) holds them in a map, so that the closes of
// all their watchers cost O(watchers), not O(watchers²).
const manyWatchers = 256

// watcherSet is the numbers of a user's watchers: an unordered slice, removal by a scan
// (at most manyWatchers long) and a swap with the last, or beyond manyWatchers a map.
// Either costs about 4-8 bytes a watcher, where a map[*Watcher]struct{} of the tens of
// watchers most users have costs about 30.
type watcherSet struct {
	few  []uint32            // while many is nil
	many map[uint32]struct{} // from manyWatchers+1 watchers, until back to a quarter
}

func (s *watcherSet) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

// add adds n, which must not be in s.
func (s *watcherSet) add(n uint32) {
	switch {
	case s.many != nil:
		s.many[n] = struct{}{}
	case len(s.few) < manyWatchers:
		if len(s.few) == cap(s.few) {
			s.few = grow(s.few)
		}
		s.few = append(s.few, n)
	default:
		s.many = make(map[uint32]struct{}, 2*manyWatchers)
		for _, m := range s.few {
			s.many[m] = struct{}{}
		}
		s.many[n] = struct{}{}
		s.few = nil
	}
}

func (s *watcherSet) remove(n uint32) {
	if s.many != nil {
		delete(s.many, n)
		if len(s.many) <= manyWatchers/4 {
			s.few = make([]uint32, 0, manyWatchers/2)
			for m := range s.many {
				s.few = append(s.few, m)
			}
			s.many = nil
		}
		return
	}
	if i := slices.Index(s.few, n); i >= 0 {
		last := len(s.few) - 1
		s.few[i] = s.few[last]
		s.few = s.few[:last]
		if last == 0 {
			s.few = nil
		}
	}
}

// each calls f with every number in s, in no order; f must not change s.
func (s *watcherSet) each(f func(n uint32)) {
	if s.many != nil {
		for n := range s.many {
			f(n)
		}
		return
	}
	for _, n := range s.few {
		f(n)
	}
}

// grow returns s with room for about an eighth more, where append would double it: most
// users are watched by tens to a few hundred watchers, and each holds its slice for as
// long as they watch, so the slack is memory per subscription. The copies cost a few
// more (transient) allocations while the slice fills.
func grow(s []uint32) []uint32 {
	// append of a make is one allocation, its capacity filled up to the size class.
	g := append([]uint32(nil), make([]uint32, len(s)+len(s)/8+2)...)
	return g[:copy(g, s)]
}
