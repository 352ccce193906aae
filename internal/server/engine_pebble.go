//go:build pebble

package server

import (
	"context"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
)

// openPebble opens the Pebble engine, compiled in with -tags pebble.
func openPebble(ctx context.Context, cfg Config, onCommit func(int, time.Duration)) (store.Store, error) {
	return pebble.Open(ctx, pebble.Options{Dir: cfg.Data, Relaxed: cfg.Relaxed, OnCommit: onCommit})
}
