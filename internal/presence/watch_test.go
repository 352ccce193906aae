package presence

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// checkIndex checks that the two sides of every subscription agree: each watcher's
// sorted user numbers and each user's watcher numbers, and the numbers given out.
func checkIndex(t *testing.T, tr *Tracker, ws []*Watcher) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	edges := 0
	for id, u := range tr.users {
		if u.id != id {
			t.Fatalf("user %q keyed %q", u.id, id)
		}
		if (u.num != 0) != (u.watchers.len() > 0) {
			t.Fatalf("user %q: number %d with %d watchers", id, u.num, u.watchers.len())
		}
		if u.num == 0 {
			continue
		}
		if tr.userNums.get(u.num) != u {
			t.Fatalf("user %q: number %d names another", id, u.num)
		}
		u.watchers.each(func(n uint32) {
			edges++
			if w := tr.watcherNums.get(n); w == nil || !contains(w.followed(), u.num) {
				t.Fatalf("user %q lists watcher %d, which does not follow them", id, n)
			}
		})
	}
	for i, w := range ws {
		users := w.followed()
		if !slices.IsSorted(users) || len(slices.Compact(slices.Clone(users))) != len(users) || int(w.count) != len(users) {
			t.Fatalf("watcher %d: users %v not sorted and unique, or not %d", i, users, w.count)
		}
		if (w.num != 0) != (len(users) > 0) || slices.Contains(users, 0) {
			t.Fatalf("watcher %d: number %d following %v", i, w.num, users)
		}
		if w.num != 0 && tr.watcherNums.get(w.num) != w {
			t.Fatalf("watcher %d: number %d names another", i, w.num)
		}
		edges -= len(users)
	}
	if edges != 0 {
		t.Fatalf("the users list %d more subscriptions than the watchers", edges)
	}
	for _, nb := range []struct {
		free []uint32
		nil  func(uint32) bool
	}{
		{tr.userNums.free, func(n uint32) bool { return tr.userNums.get(n) == nil }},
		{tr.watcherNums.free, func(n uint32) bool { return tr.watcherNums.get(n) == nil }},
	} {
		if len(slices.Compact(slices.Sorted(slices.Values(nb.free)))) != len(nb.free) {
			t.Fatalf("a number given back twice: %v", nb.free)
		}
		for _, n := range nb.free {
			if n == 0 || !nb.nil(n) {
				t.Fatalf("number %d given back but in use", n)
			}
		}
	}
}

// TestWatchRandom runs random watches, replaces, unwatches and closes against a model of
// who follows whom, checking the index after each and the delivery at the end.
func TestWatchRandom(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := New(Config{Tick: time.Hour, MaxSubscriptions: 8}, func() time.Time { return now }, nil)
	t.Cleanup(tr.Close)
	rng := rand.New(rand.NewPCG(1, 2))
	ws := make([]*Watcher, 20)
	model := make([]map[string]bool, len(ws))
	for i := range ws {
		ws[i] = tr.NewWatcher(func() {})
		model[i] = map[string]bool{}
	}
	some := func() []string {
		ids := make([]string, rng.IntN(6))
		for k := range ids {
			ids[k] = fmt.Sprintf("u%d", rng.IntN(12)) // repeats too
		}
		return ids
	}
	for step := range 3000 {
		i := rng.IntN(len(ws))
		w, m := ws[i], model[i]
		switch ids := some(); rng.IntN(8) {
		case 0, 1, 2, 3:
			replace := rng.IntN(4) == 0
			n := len(ids)
			if !replace {
				n = len(m)
				for _, id := range ids {
					if !m[id] {
						n++
					}
				}
			}
			es, err := w.Watch(ids, replace)
			if n > 8 {
				if !errors.Is(err, ErrTooMany) {
					t.Fatalf("step %d: %d users: %v, want ErrTooMany", step, n, err)
				}
				break
			}
			if err != nil || len(es) != len(ids) {
				t.Fatalf("step %d: %v, %d entries for %d users", step, err, len(es), len(ids))
			}
			if replace {
				clear(m)
			}
			for k, id := range ids {
				m[id] = true
				if es[k].UserID != id {
					t.Fatalf("step %d: entry %d is %q, want %q", step, k, es[k].UserID, id)
				}
			}
		case 4, 5, 6:
			w.Unwatch(ids)
			for _, id := range ids {
				delete(m, id)
			}
		case 7:
			w.Close()
			clear(m)
		}
		if w.Len() != len(m) {
			t.Fatalf("step %d: watcher %d follows %d, want %d", step, i, w.Len(), len(m))
		}
		checkIndex(t, tr, ws)
	}
	for k := range 12 {
		tr.Connected(fmt.Sprintf("u%d", k), "d1")
	}
	tr.Turn(now)
	for i, w := range ws {
		var got []string
		for _, e := range w.Take() {
			got = append(got, e.UserID)
		}
		slices.Sort(got)
		if want := slices.Sorted(func(yield func(string) bool) {
			for id := range model[i] {
				if !yield(id) {
					return
				}
			}
		}); !slices.Equal(got, want) {
			t.Errorf("watcher %d was handed %v, want %v", i, got, want)
		}
	}
}

// TestWatchedByMany: a user followed by more than manyWatchers holds them in a map, and
// back in a slice when few are left; once nobody follows them their record goes.
func TestWatchedByMany(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	ws := make([]*Watcher, 3*manyWatchers)
	for i := range ws {
		ws[i] = tr.NewWatcher(func() {})
		if _, err := ws[i].Watch([]string{"star", fmt.Sprintf("fan%d", i)}, false); err != nil {
			t.Fatal(err)
		}
	}
	star := func() *user { tr.mu.Lock(); defer tr.mu.Unlock(); return tr.users["star"] }
	if u := star(); u == nil || u.watchers.many == nil || u.watchers.len() != len(ws) {
		t.Fatalf("star's watchers: %+v, want %d in a map", u, len(ws))
	}
	checkIndex(t, tr, ws)
	tr.Connected("star", "d1")
	tr.Turn(now)
	for i, w := range ws {
		if got := w.Take(); len(got) != 1 || got[0].UserID != "star" || got[0].State != Online {
			t.Fatalf("watcher %d was handed %+v, want star online", i, got)
		}
	}
	for _, w := range ws[10:] {
		w.Unwatch([]string{"star"})
	}
	if u := star(); u.watchers.many != nil || u.watchers.len() != 10 {
		t.Fatalf("star's watchers: %d, many %v; want 10 in a slice", u.watchers.len(), u.watchers.many != nil)
	}
	checkIndex(t, tr, ws)
	tr.Disconnected("star", "d1")
	for _, w := range ws {
		w.Close()
	}
	checkIndex(t, tr, ws)
	now = now.Add(time.Minute)
	tr.Turn(now)
	if u := star(); u == nil || u.num != 0 || u.watchers.len() != 0 {
		t.Fatalf("star after the closes: %+v, want a record with no watchers (last active is kept)", u)
	}
}

// TestWatchKeepsNoCallerString: the tracker keeps its own copy of a user id it first
// hears of from a watcher, not the caller's string (a decoded frame's).
func TestWatchKeepsNoCallerString(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	w := tr.NewWatcher(func() {})
	id := string([]byte("alice"))
	es, _ := w.Watch([]string{id}, false)
	tr.mu.Lock()
	kept := tr.users["alice"].id
	tr.mu.Unlock()
	if unsafeSame(kept, id) {
		t.Error("the record keeps the caller's string")
	}
	if !unsafeSame(es[0].UserID, kept) {
		t.Error("the entry is not the record's own string")
	}
}

func unsafeSame(a, b string) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.StringData(a) == unsafe.StringData(b)
}

// TestFollowedRoundTrip: the watcher's encoded list gives back the numbers it was set
// to, the largest too.
func TestFollowedRoundTrip(t *testing.T) {
	for _, nums := range [][]uint32{
		nil,
		{1},
		{1, 2, 3, 127, 128, 129, 16_383, 16_384},
		{5, 1 << 21, 1<<28 + 3, 1<<32 - 2, 1<<32 - 1},
	} {
		var w Watcher
		w.setFollowed(nums)
		if got := w.followed(); !slices.Equal(got, nums) || int(w.count) != len(nums) || len(w.users) != cap(w.users) {
			t.Errorf("%v: got %v (count %d, %d of %d bytes)", nums, got, w.count, len(w.users), cap(w.users))
		}
	}
}

// TestUnwatchEveryone: a watcher that unwatches every user it follows follows nobody, gives
// its number back, and closes cleanly; the users, watched by nobody, are forgotten, and a
// watcher after it follows them afresh.
func TestUnwatchEveryone(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr := testTracker(t, &now)
	w := tr.NewWatcher(func() {})
	if _, err := w.Watch([]string{"a", "b"}, false); err != nil {
		t.Fatal(err)
	}
	w.Unwatch([]string{"b", "a", "nobody"})
	if w.Len() != 0 {
		t.Fatalf("follows %d after unwatching everyone", w.Len())
	}
	checkIndex(t, tr, []*Watcher{w})
	w.Close()
	again := tr.NewWatcher(func() {})
	if _, err := again.Watch([]string{"a"}, false); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, tr, []*Watcher{w, again})
	tr.Connected("a", "d1")
	tr.Turn(now)
	if got := again.Take(); len(got) != 1 || got[0].UserID != "a" || got[0].State != Online {
		t.Fatalf("the new watcher was handed %+v, want a online", got)
	}
	if got := w.Take(); got != nil {
		t.Fatalf("the closed watcher was handed %+v", got)
	}
}
