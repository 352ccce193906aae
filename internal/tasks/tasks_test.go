package tasks

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestCloseWaitsAndCancels: Close cancels the tasks' context and returns only once every
// task has returned; after it, nothing starts.
func TestCloseWaitsAndCancels(t *testing.T) {
	g := New()
	started := make(chan struct{})
	var finished atomic.Bool
	if !g.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done() // runs until Close
		finished.Store(true)
	}) {
		t.Fatal("Go refused on an open group")
	}
	<-started
	g.Close()
	if !finished.Load() {
		t.Fatal("Close returned before its task did")
	}
	if g.Go(func(context.Context) { t.Error("a task started after Close") }) {
		t.Fatal("Go accepted a task after Close")
	}
	if g.Do(func(context.Context) { t.Error("Do ran after Close") }) {
		t.Fatal("Do accepted a task after Close")
	}
	g.Close() // a second Close is harmless
}

// TestDoIsWaitedFor: Close waits for a Do in progress on another goroutine.
func TestDoIsWaitedFor(t *testing.T) {
	g := New()
	inside, release := make(chan struct{}), make(chan struct{})
	var done atomic.Bool
	go g.Do(func(context.Context) {
		close(inside)
		<-release
		done.Store(true)
	})
	<-inside
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a Do was running")
	default:
	}
	close(release)
	<-closed
	if !done.Load() {
		t.Fatal("Close returned before the Do finished")
	}
}
