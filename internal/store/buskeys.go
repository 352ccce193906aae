package store

import (
	"context"
	"errors"
	"fmt"
)

// busKeyAttempts bounds RotateBusKey's retries when other rotations take the next id first.
const busKeyAttempts = 10

// EnsureBusKey returns the bus's cluster keys, ascending by ID, adding the first (ID 1,
// secret from newSecret, created at now, Unix ms) when there is none. Nodes starting at
// once all call it: the store takes one first key (AddBusKey refuses a second under ID 1)
// and every caller returns it.
func EnsureBusKey(ctx context.Context, st Store, now int64, newSecret func() ([]byte, error)) ([]BusKey, error) {
	var keys []BusKey
	if err := st.View(ctx, func(tx ReadTx) (err error) { keys, err = tx.BusKeys(ctx); return err }); err != nil || len(keys) > 0 {
		return keys, err
	}
	secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	err = st.Update(ctx, func(tx Tx) error { return tx.AddBusKey(ctx, BusKey{ID: 1, Secret: secret, CreatedAt: now}) })
	if err != nil && !errors.Is(err, ErrExists) {
		return nil, err
	}
	err = st.View(ctx, func(tx ReadTx) (err error) { keys, err = tx.BusKeys(ctx); return err })
	return keys, err
}

// RotateBusKey adds the next cluster key (the highest ID plus one) and returns it. Two
// rotations at once add two keys, one after the other.
func RotateBusKey(ctx context.Context, st Store, now int64, newSecret func() ([]byte, error)) (BusKey, error) {
	secret, err := newSecret()
	if err != nil {
		return BusKey{}, err
	}
	for range busKeyAttempts {
		k := BusKey{ID: 1, Secret: secret, CreatedAt: now}
		err = st.Update(ctx, func(tx Tx) error {
			keys, err := tx.BusKeys(ctx)
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				k.ID = keys[len(keys)-1].ID + 1
			}
			return tx.AddBusKey(ctx, k)
		})
		if !errors.Is(err, ErrExists) {
			return k, err
		}
	}
	return BusKey{}, fmt.Errorf("store: rotate bus key: %d attempts lost to other rotations: %w", busKeyAttempts, err)
}
