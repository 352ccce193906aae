package pebble

import (
	"bytes"
	"context"
	"errors"

	"github.com/parleychat/parley/internal/store"
)

// BusKeys implements store.BusKeyReader: the keys b int(id), in id order. A value is
// int(created_at) followed by the secret.
func (r readTx) BusKeys(ctx context.Context) ([]store.BusKey, error) {
	t := r.t
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	it, err := t.iter([]byte{tBusKey}, []byte{tBusKey + 1})
	if err != nil {
		return nil, err
	}
	var out []store.BusKey
	for valid := it.First(); valid; valid = it.Next() {
		var k store.BusKey
		var rest []byte
		k.ID, rest, err = readInt(it.Key()[1:])
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		var v []byte
		if err == nil {
			v, err = it.ValueAndErr()
		}
		if err == nil {
			k.CreatedAt, rest, err = readInt(v)
			k.Secret = bytes.Clone(rest)
		}
		if err != nil {
			return nil, errors.Join(corrupt(err, "bus keys"), it.Close())
		}
		out = append(out, k)
	}
	return out, closeIter(it)
}

// AddBusKey implements store.BusKeyWriter.
func (w writeTx) AddBusKey(ctx context.Context, k store.BusKey) error {
	t := w.t
	if err := t.check(ctx); err != nil {
		return err
	}
	t.key = appendInt(append(t.key[:0], tBusKey), k.ID)
	if found, err := t.exists(t.key); err != nil || found {
		if err == nil {
			err = exists("add bus key %d", k.ID)
		}
		return err
	}
	t.enc = append(appendInt(t.enc[:0], k.CreatedAt), k.Secret...)
	return t.set(t.key, t.enc, nil, false)
}
