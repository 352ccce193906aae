package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/metrics"
	"github.com/parleychat/parley/internal/store"
)

// sealBus wraps b in the cluster key's seal (docs/deployment.md, "Trust model"): what the
// node publishes is sealed, and only what opens reaches chat and the push feed. The first
// key is created in the store if there is none yet.
func sealBus(ctx context.Context, cfg Config, st store.Store, b bus.Bus, m *metrics.Metrics) (*bus.Sealed, error) {
	if _, err := store.EnsureBusKey(ctx, st, time.Now().UnixMilli(), NewBusSecret); err != nil {
		return nil, fmt.Errorf("bus cluster key: %w", err)
	}
	return bus.Seal(ctx, b, StoreBusKeys{Store: st}, bus.SealOptions{Reload: cfg.BusKeyReload, OnReject: m.BusRejected, Logger: cfg.Logger})
}

// NewBusSecret returns a fresh cluster key secret.
func NewBusSecret() ([]byte, error) {
	secret := make([]byte, bus.KeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// StoreBusKeys reads the cluster keys of a sealed bus from the store the nodes share.
type StoreBusKeys struct{ Store store.Store }

var _ bus.KeySource = StoreBusKeys{}

// BusKeys implements bus.KeySource.
func (s StoreBusKeys) BusKeys(ctx context.Context) ([]bus.Key, error) {
	var keys []store.BusKey
	if err := s.Store.View(ctx, func(tx store.ReadTx) (err error) { keys, err = tx.BusKeys(ctx); return err }); err != nil {
		return nil, err
	}
	out := make([]bus.Key, 0, len(keys))
	for _, k := range keys {
		if k.ID <= 0 || k.ID > math.MaxUint32 {
			return nil, fmt.Errorf("bus key id %d is out of range", k.ID)
		}
		out = append(out, bus.Key{ID: uint32(k.ID), Secret: k.Secret})
	}
	return out, nil
}
