package postgres

import (
	"context"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// BusKeys implements store.BusKeyReader.
func (t readTx) BusKeys(ctx context.Context) ([]store.BusKey, error) {
	return collect(ctx, t.tx, sqlrow.BusKey, "bus keys", `SELECT id, secret, created_at FROM bus_keys ORDER BY id`)
}

// AddBusKey implements store.BusKeyWriter. ON CONFLICT DO NOTHING rather than a unique
// violation, which would abort the transaction: the contract leaves it usable.
func (t writeTx) AddBusKey(ctx context.Context, k store.BusKey) error {
	tag, err := t.tx.Exec(ctx, `INSERT INTO bus_keys (id, secret, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		k.ID, k.Secret, k.CreatedAt)
	return expectOne(tag, err, store.ErrExists, "add bus key %d", k.ID)
}
