package sqlite

import (
	"context"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// BusKeys implements store.BusKeyReader.
func (t readTx) BusKeys(ctx context.Context) ([]store.BusKey, error) {
	return queryAll(ctx, t.q, sqlrow.BusKey, stBusKeys, nil, "bus keys")
}

// AddBusKey implements store.BusKeyWriter: the primary key refuses a second key under an id.
func (t writeTx) AddBusKey(ctx context.Context, k store.BusKey) error {
	if _, err := t.q.exec(ctx, stAddBusKey, k.ID, k.Secret, k.CreatedAt); err != nil {
		return t.q.fail(err, "add bus key %d", k.ID)
	}
	return nil
}
