package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// WhileLeading runs fn while this process holds st's lead for name (Leader), again each
// time it gets the lead back after losing it, until ctx ends; fn's context ends when the
// lead is lost, and each term's lead is released only after fn has returned. On a store
// without Leader (only this process opens it) it runs fn once, always leading. A failed
// Lead is retried after retry. Errors of fn are logged; WhileLeading returns when ctx ends.
func WhileLeading(ctx context.Context, st Store, name string, retry time.Duration, log *slog.Logger, fn func(ctx context.Context) error) {
	l, ok := st.(Leader)
	if !ok {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			log.Error(name+": stopped", "err", err)
		}
		return
	}
	for ctx.Err() == nil {
		lost, release, err := l.Lead(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error(name+": lead", "err", err)
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		log.Info(name + ": this node leads")
		lctx, cancel := context.WithCancel(ctx)
		var watch sync.WaitGroup // the lead's watcher: waited before the lead is released
		watch.Go(func() {
			select {
			case <-lost:
				log.Warn(name + ": lost the lead")
			case <-lctx.Done():
			}
			cancel()
		})
		err = fn(lctx)
		cancel()
		watch.Wait()
		release()
		if err != nil && ctx.Err() == nil {
			log.Error(name+": stopped", "err", err)
		}
	}
}
