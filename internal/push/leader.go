package push

// This file is leadership: on a store several nodes share, which node's pusher pushes.

import (
	"context"
	"sync"

	"github.com/parleychat/parley/internal/store"
)

// lead runs the pusher while this node holds l's "push" lead, waiting for it again each
// time it is lost, until ctx ends. Each term's watcher, which ends the term when the lead
// is lost, has returned before lead releases that term or returns.
func (p *Pusher) lead(ctx context.Context, l store.Leader) error {
	for ctx.Err() == nil {
		lost, release, err := l.Lead(ctx, "push")
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.o.Log.Error("push: lead", "err", err)
			if !sleep(ctx, p.o.MinBackoff) {
				return nil
			}
			continue
		}
		p.o.Log.Info("push: this node pushes")
		lctx, cancel := context.WithCancel(ctx)
		var watch sync.WaitGroup // the lead's watcher: waited before the lead is released
		watch.Go(func() {
			select {
			case <-lost:
				p.o.Log.Warn("push: lost the lead")
			case <-lctx.Done():
			}
			cancel()
		})
		err = p.run(lctx)
		cancel()
		watch.Wait()
		release()
		if err != nil && ctx.Err() == nil {
			p.o.Log.Error("push: stopped", "err", err)
		}
	}
	return nil
}

// Leading reports whether this pusher is the one that pushes (on a store several nodes
// share, the holder of the lead; on one node, while it runs).
func (p *Pusher) Leading() bool { return p.leading.Load() }
