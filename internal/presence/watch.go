package presence

import (
	"errors"
	"fmt"
)

// ErrTooMany is returned by Watch when a watcher would follow more than MaxSubscriptions.
var ErrTooMany = errors.New("presence: too many subscriptions")

// Watcher is one connection's subscription to the presence of a bounded set of users. It
// holds the set and the changes not yet taken; the connection's writer takes them (Take)
// after notify, which the tracker calls at most once per turn.
type Watcher struct {
	t      *Tracker
	notify func()
	// Guarded by t.mu:
	users   map[string]struct{}
	pending []Entry
}

// NewWatcher returns a watcher that follows nobody; notify is called, with the tracker's
// lock held, when changes wait, and must not block.
func (t *Tracker) NewWatcher(notify func()) *Watcher {
	return &Watcher{t: t, notify: notify}
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
			if _, ok := w.users[id]; !ok {
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
	if w.users == nil {
		w.users = make(map[string]struct{}, len(users))
	}
	now := t.now()
	out := make([]Entry, 0, len(users))
	for _, id := range users {
		u := t.userLocked(id)
		if u.watchers == nil {
			u.watchers = make(map[*Watcher]struct{}, 1)
		}
		u.watchers[w] = struct{}{}
		w.users[id] = struct{}{}
		e := t.entryLocked(id, u, now)
		if !u.hidden && u.shown != e.State && u.shownAt.IsZero() {
			u.shown = e.State // nobody was watching: this is the first state handed out
		}
		out = append(out, t.shownEntryLocked(id, u))
	}
	return out, nil
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
		if _, ok := w.users[id]; ok {
			delete(w.users, id)
			t.unwatchLocked(id, w)
		}
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

func (w *Watcher) dropLocked() {
	for id := range w.users {
		w.t.unwatchLocked(id, w)
	}
	w.users = nil
}

func (t *Tracker) unwatchLocked(id string, w *Watcher) {
	if u := t.users[id]; u != nil {
		delete(u.watchers, w)
		if len(u.watchers) == 0 {
			u.watchers = nil
			t.forgetLocked(id, u)
		}
	}
}

// handLocked queues b for w and notifies it. Lock should be held.
func (w *Watcher) handLocked(b []Entry) {
	if w.users == nil {
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
