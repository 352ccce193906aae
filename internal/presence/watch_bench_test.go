package presence

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// liveHeap returns the bytes of live heap objects and of heap spans in use after a full
// collection.
func liveHeap() (alloc, inuse uint64) {
	runtime.GC()
	runtime.GC() // the first may leave objects a finalizer or a sweep still held
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapInuse
}

// BenchmarkWatchMemory reports the live heap that presence subscriptions cost: 10,000
// connected users, each watched by the connections of 100 others, as in the load tool's
// presence scenario (parley-bench presence). The user ids each Watch gets are fresh
// strings, as the gateway's decoded subscribe frames are, so that a watcher which keeps
// them shows. B/sub is live heap per subscription, B/watcher per connection subscribed
// (its Watcher, the 100 subscriptions and whatever they keep); inuse-B/sub counts the
// heap's spans in use (live objects and fragmentation), as the load tool does.
//
//	go test -run '^$' -bench WatchMemory -benchtime 1x ./internal/presence/
func BenchmarkWatchMemory(b *testing.B) {
	const users, subs = 10_000, 100
	for b.Loop() {
		b.StopTimer()
		now := time.Unix(1_800_000_000, 0)
		tr := New(Config{Tick: time.Hour}, func() time.Time { return now }, nil)
		for i := range users {
			tr.Connected(fmt.Sprintf("u%d", i), "d1")
		}
		ids := make([][]string, users)
		a0, i0 := liveHeap()
		b.StartTimer()
		ws := make([]*Watcher, users)
		for i := range ws {
			ids[i] = make([]string, subs)
			for k := range ids[i] {
				ids[i][k] = fmt.Sprintf("u%d", (i+1+k*97)%users) // never i itself
			}
			ws[i] = tr.NewWatcher(func() {})
			if _, err := ws[i].Watch(ids[i], false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		ids = nil // the gateway's frames are garbage once answered
		a1, i1 := liveHeap()
		n := float64(users * subs)
		b.ReportMetric(float64(a1-a0)/n, "B/sub")
		b.ReportMetric(float64(a1-a0)/users, "B/watcher")
		b.ReportMetric(float64(i1-i0)/n, "inuse-B/sub")
		for _, w := range ws {
			w.Close()
		}
		tr.Close()
		b.StartTimer()
	}
}

// BenchmarkCloseWatchersOfOneUser closes, one by one, 10,000 watchers of the same user
// (someone everyone follows, as at a connection storm's end): the cost per close must
// not grow with the user's watchers.
func BenchmarkCloseWatchersOfOneUser(b *testing.B) {
	const n = 10_000
	now := time.Unix(1_800_000_000, 0)
	tr := New(Config{Tick: time.Hour}, func() time.Time { return now }, nil)
	defer tr.Close()
	ws := make([]*Watcher, n)
	for b.Loop() {
		b.StopTimer()
		for i := range ws {
			ws[i] = tr.NewWatcher(func() {})
			if _, err := ws[i].Watch([]string{"star"}, false); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for _, w := range ws {
			w.Close()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/close")
}
