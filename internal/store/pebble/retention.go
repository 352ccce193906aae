package pebble

import (
	"context"
	"errors"
	"maps"
	"slices"
)

// pruneEvents is store.Store.PruneEvents on t's batch (see Store.PruneEvents). It takes
// the hour hints (keys.go) of hours
// that begin before the bound, oldest first, and for each one removes the user's oldest
// events while their ts is before the bound: a prefix of the log, so that "every cursor
// <= Pruned is gone" holds. Events of a database written by layout 1, indexed one by one,
// go first (pruneIndexed).
func (w writeTx) pruneEvents(ctx context.Context, before int64, limit int) (int, error) {
	t := w.t
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	removed, err := t.pruneIndexed(before, limit)
	if err != nil || removed >= limit {
		return removed, err
	}
	hints, err := t.hourHints(before, limit-removed)
	if err != nil {
		return removed, err
	}
	for _, h := range hints {
		n, done, err := t.pruneUser(h.user, before, limit-removed)
		if err != nil {
			return removed, err
		}
		removed += n
		if done && (h.hour+1)*hourMS <= before { // the whole hour is past the bound
			if err := t.del(eventHourKey(t.key[:0], h.hour, h.user), nil); err != nil {
				return removed, err
			}
		}
		if removed >= limit {
			break
		}
	}
	return removed, nil
}

// hourHint is one hour hint: user has (or had) events in hour.
type hourHint struct {
	hour int64
	user string
}

// hourHints returns up to limit hour hints of hours that begin before the bound, oldest
// first.
func (t *txn) hourHints(before int64, limit int) ([]hourHint, error) {
	it, err := t.iter([]byte{tEventByHour}, appendInt([]byte{tEventByHour}, hourOf(before)+1))
	if err != nil {
		return nil, err
	}
	var out []hourHint
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		hour, rest, err := readInt(it.Key()[1:])
		var user string
		if err == nil {
			user, _, err = readStr(rest)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "prune events"), it.Close())
		}
		out = append(out, hourHint{hour: hour, user: user})
	}
	return out, closeIter(it)
}

// pruneUser removes up to limit of the user's oldest events while their ts is before the
// bound, and raises the user's Pruned bound to the last one removed. done reports that it
// stopped at an event at or past the bound, or at the end of the log, not at the limit.
func (t *txn) pruneUser(user string, before int64, limit int) (removed int, done bool, err error) {
	prefix := appendStr([]byte{tEvent}, user)
	it, err := t.iter(prefix, prefixEnd(prefix))
	if err != nil {
		return 0, false, err
	}
	type doomedEvent struct {
		cursor int64
		val    []byte
	}
	var doomed []doomedEvent
	done = true
	for valid := it.First(); valid; valid = it.Next() {
		if len(doomed) == limit {
			done = false
			break
		}
		e, v, err := iterEvent(it, prefix, user)
		if err != nil {
			return 0, false, errors.Join(corrupt(err, "prune events of user %q", user), it.Close())
		}
		if e.TS >= before {
			break
		}
		doomed = append(doomed, doomedEvent{cursor: e.Cursor, val: slices.Clone(v)}) // for the undo log
	}
	if err := closeIter(it); err != nil {
		return 0, false, err
	}
	if len(doomed) == 0 {
		return 0, done, nil
	}
	// The bounds first, while Last may still be the newest event's cursor.
	b, found, err := t.cursors(user)
	if err != nil || !found {
		return 0, false, errors.Join(err, corrupt(errCorrupt, "events of unknown user %q", user))
	}
	prev := slices.Clone(t.val) // the bounds key's value, which t.cursors read last
	b.Pruned = max(b.Pruned, doomed[len(doomed)-1].cursor)
	t.key = boundsKey(t.key[:0], user)
	t.enc = encodeBounds(t.enc[:0], b)
	if err := t.set(t.key, t.enc, prev, true); err != nil {
		return 0, false, err
	}
	for _, d := range doomed {
		t.key = eventKey(t.key[:0], user, d.cursor)
		if err := t.del(t.key, d.val); err != nil {
			return 0, false, err
		}
	}
	return len(doomed), done, nil
}

// pruneIndexed is PruneEvents over the per-event time index of layout 1. After removing
// the oldest events it also removes any event of an affected user at or below the new
// Pruned bound that a clock step backwards left with a later ts, so that "every cursor <=
// Pruned is gone" holds; such stragglers count in the result and may take it past limit
// (as in the SQLite backend).
func (t *txn) pruneIndexed(before int64, limit int) (int, error) {
	oldest, err := t.oldestEvents(before, limit)
	if err != nil {
		return 0, err
	}
	highest := make(map[string]int64)
	for _, o := range oldest {
		if err := t.removeEvent(o.user, o.cursor, o.ts, true); err != nil {
			return 0, err
		}
		if c, ok := highest[o.user]; !ok || o.cursor > c {
			highest[o.user] = o.cursor
		}
	}
	removed := len(oldest)
	for _, user := range slices.Sorted(maps.Keys(highest)) {
		n, err := t.raisePruned(user, highest[user])
		if err != nil {
			return 0, err
		}
		removed += n
	}
	return removed, nil
}

// timeEntry is one entry of the events-by-time index.
type timeEntry struct {
	ts     int64
	user   string
	cursor int64
}

// oldestEvents returns up to limit entries of the time index with ts < before, oldest
// first (by ts, then user, then cursor).
func (t *txn) oldestEvents(before int64, limit int) ([]timeEntry, error) {
	lower := []byte{tEventByTime}
	it, err := t.iter(lower, appendInt([]byte{tEventByTime}, before))
	if err != nil {
		return nil, err
	}
	var out []timeEntry
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		ts, rest, err := readInt(it.Key()[1:])
		var e timeEntry
		if err == nil {
			e.ts = ts
			e.user, rest, err = readStr(rest)
		}
		if err == nil {
			e.cursor, _, err = readInt(rest)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "prune events"), it.Close())
		}
		out = append(out, e)
	}
	return out, closeIter(it)
}

// removeEvent deletes the event (user, cursor) and its time index entry. indexed says the
// index entry is known to exist (it was just read); otherwise it is looked up.
func (t *txn) removeEvent(user string, cursor, ts int64, indexed bool) error {
	t.key = eventKey(t.key[:0], user, cursor)
	n := len(t.key)
	t.key = eventByTimeKey(t.key, ts, user, cursor)
	ek, tk := t.key[:n], t.key[n:]
	prev, found, err := t.get(ek)
	if err != nil {
		return err
	}
	if found {
		if err := t.del(ek, prev); err != nil {
			return err
		}
	}
	if !indexed {
		if indexed, err = t.exists(tk); err != nil {
			return err
		}
	}
	if indexed {
		return t.del(tk, nil)
	}
	return nil
}

// raisePruned removes the user's remaining events up to cursor, returning how many, and
// raises the user's Pruned bound to cursor.
func (t *txn) raisePruned(user string, cursor int64) (int, error) {
	prefix := appendStr([]byte{tEvent}, user)
	end, ok := succ(cursor)
	upper := prefixEnd(prefix)
	if ok {
		upper = appendInt(slices.Clip(prefix), end)
	}
	it, err := t.iter(prefix, upper)
	if err != nil {
		return 0, err
	}
	var stragglers []timeEntry
	for valid := it.First(); valid; valid = it.Next() {
		e, _, err := iterEvent(it, prefix, user)
		if err != nil {
			return 0, errors.Join(corrupt(err, "prune events of user %q", user), it.Close())
		}
		stragglers = append(stragglers, timeEntry{ts: e.TS, user: user, cursor: e.Cursor})
	}
	if err := closeIter(it); err != nil {
		return 0, err
	}
	for _, s := range stragglers {
		if err := t.removeEvent(s.user, s.cursor, s.ts, false); err != nil {
			return 0, err
		}
	}
	t.key = boundsKey(t.key[:0], user)
	prev, found, err := t.get(t.key)
	if err != nil || !found {
		return len(stragglers), err // events of an unknown user cannot exist
	}
	b, err := decodeBounds(prev)
	if err != nil {
		return 0, corrupt(err, "cursors of user %q", user)
	}
	if cursor <= b.Pruned {
		return len(stragglers), nil
	}
	b.Pruned = cursor
	t.enc = encodeBounds(t.enc[:0], b)
	return len(stragglers), t.set(t.key, t.enc, prev, true)
}
