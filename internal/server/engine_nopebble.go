//go:build !pebble

package server

import (
	"context"
	"errors"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// openPebble explains how to get the Pebble engine: it is left out of the default build,
// which stays pure Go (Pebble links a C zstd library whenever cgo is enabled).
func openPebble(context.Context, Config, func(int, time.Duration)) (store.Store, error) {
	return nil, errors.New("this binary was built without the pebble engine: build it with `go build -tags pebble ./cmd/parley`")
}
