package client

import (
	"testing"
)

func TestPushQueue(t *testing.T) {
	q := newPushQueue()
	ev := msgEvent(1, "c1", 1, "bob")
	fit := maxQueuedBytes / eventSize(&ev)
	for i := range fit {
		if !q.put(ev) {
			t.Fatalf("push %d of %d did not fit", i+1, fit)
		}
	}
	if q.put(ev) {
		t.Fatalf("push %d fit in %d bytes", fit+1, maxQueuedBytes)
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no ready token after a put")
	}
	batch, mark := q.take(nil)
	if len(batch) != fit || !q.empty() || q.dropped(mark) {
		t.Fatalf("take: %d events, empty %v, dropped %v; want %d, true, false", len(batch), q.empty(), q.dropped(mark), fit)
	}
	if !q.put(ev) {
		t.Fatal("a push did not fit in the emptied queue")
	}
	q.drop()
	if !q.empty() || !q.dropped(mark) {
		t.Errorf("after drop: empty %v, dropped %v; want true, true", q.empty(), q.dropped(mark))
	}
	// The spare batch is reused once cleared, unless it grew large.
	small := make([]SyncEvent, 1, 8)
	small[0] = ev
	q.take(small)
	if small[0].Data != nil {
		t.Error("take left the spare batch's events in place")
	}
	q.put(ev)
	if got, _ := q.take(nil); cap(got) != 8 {
		t.Errorf("the next batch has capacity %d, want the spare's 8", cap(got))
	}
	q.take(make([]SyncEvent, 0, keptBatchCap+1))
	q.put(ev)
	if got, _ := q.take(nil); cap(got) > keptBatchCap {
		t.Errorf("a spare of capacity %d was kept", cap(got))
	}
}
