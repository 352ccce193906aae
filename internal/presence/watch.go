package presence

import (
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
// A subscription costs about 8 bytes: the watcher holds the numbers of the users it
// follows (a sorted []uint32, at most MaxSubscriptions long), and each user the numbers
// of its watchers (a watcherSet); no user id string is kept per subscription.
type Watcher struct {
	t      *Tracker
	notify func()
	// Guarded by t.mu:
	num     uint32   // this watcher's number while it follows anyone, else 0
	users   []uint32 // the numbers of the users followed, sorted
	pending []Entry
}

// NewWatcher returns a watcher that follows nobody; notify is called, with the tracker's
// lock held, when changes wait, and must not block.
func (t *Tracker) NewWatcher(notify func()) *Watcher {
	return &Watcher{t: t, notify: notify}
}

// follows reports whether w follows the user numbered n. Lock should be held.
func (w *Watcher) follows(n uint32) bool {
	_, ok := slices.BinarySearch(w.users, n)
	return n != 0 && ok
}

// Watch makes w follow users (replacing its set when replace is set, else adding to it)
// and returns their current entries, in the order given. It returns ErrTooMany, and
// changes nothing, if w would follow more than MaxSubscriptions.
func (w *Watcher) Watch(users []string, replace bool) ([]Entry, error) {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(users)
	if !replace {
		n = len(w.users)
		for _, id := range users {
			if u := t.users[id]; u == nil || !w.follows(u.num) {
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
		if !w.follows(u.num) {
			added = append(added, u.num)
		}
		e := t.entryLocked(u.id, u, now)
		if !u.hidden && u.shown != e.State && u.shownAt.IsZero() {
			u.shown = e.State // nobody was watching: this is the first state handed out
		}
		out = append(out, t.shownEntryLocked(u.id, u))
	}
	w.addLocked(added)
	return out, nil
}

// addLocked makes w follow the users numbered added (not yet followed, maybe repeated).
// w.users is made anew, exactly as long as it needs to be. Lock should be held.
func (w *Watcher) addLocked(added []uint32) {
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
	merged := make([]uint32, 0, len(w.users)+len(added))
	old := w.users
	for len(old) > 0 && len(added) > 0 {
		if old[0] < added[0] {
			merged, old = append(merged, old[0]), old[1:]
		} else {
			merged, added = append(merged, added[0]), added[1:]
		}
	}
	w.users = append(append(merged, old...), added...)
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
	for _, id := range users {
		u := t.users[id]
		if u == nil || u.num == 0 {
			continue
		}
		if i, ok := slices.BinarySearch(w.users, u.num); ok {
			w.users = slices.Delete(w.users, i, i+1)
			t.unwatchLocked(u, w)
		}
	}
	if len(w.users) == 0 {
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

// Len returns how many users w follows.
func (w *Watcher) Len() int {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	return len(w.users)
}

// dropLocked makes w follow nobody. Each user's removal costs at most manyWatchers steps
// (watcherSet), so that a watcher's close is bounded by MaxSubscriptions of them however
// many others watch the same users. Lock should be held.
func (w *Watcher) dropLocked() {
	for _, n := range w.users {
		w.t.unwatchLocked(w.t.userNums.get(n), w)
	}
	w.users = nil
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
