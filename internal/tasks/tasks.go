// Package tasks gives a component's background goroutines an owner. A Group starts them
// with the component's lifetime context and Close cancels that context and waits for every
// one of them, so that the component's owner can then close what they use (a store, a bus)
// knowing that nothing still runs on it. After Close a Group starts nothing more.
package tasks

import (
	"context"
	"sync"
)

// Group is the background work of one component. Its zero value is not usable: call New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.RWMutex // read-held while a task is admitted, write-held by Close
	closed bool
	wg     sync.WaitGroup
}

// New returns an open Group whose lifetime context ends at Close.
func New() *Group {
	ctx, cancel := context.WithCancel(context.Background()) // the root of the component's lifetime
	return &Group{ctx: ctx, cancel: cancel}
}

// Context is the Group's lifetime: background work reads and writes under it, so Close
// interrupts what would otherwise outlive the component.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs f on a goroutine of its own with the lifetime context, unless the Group is
// closed; it reports whether f was started.
func (g *Group) Go(f func(ctx context.Context)) bool {
	if !g.enter() {
		return false
	}
	go func() {
		defer g.wg.Done()
		f(g.ctx)
	}()
	return true
}

// Do runs f on the calling goroutine as one of the Group's tasks (Close waits for it),
// unless the Group is closed; it reports whether f ran. A timer's callback uses it, since
// the timer's goroutine is not the Group's.
func (g *Group) Do(f func(ctx context.Context)) bool {
	if !g.enter() {
		return false
	}
	defer g.wg.Done()
	f(g.ctx)
	return true
}

func (g *Group) enter() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Close cancels the lifetime context and waits until every task has returned. It may be
// called more than once; a task must not call it (it would wait for itself).
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}
