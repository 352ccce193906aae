package push

// This file is the durable per-device cursor: advanced in memory behind each provider's
// acceptance, and flushed to the store every FlushEvery.

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// advance records that the device dealt with every event up to cursor, for the next flush.
func (p *Pusher) advance(uid, device string, cursor int64, lastPush time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.users[uid]
	if u == nil {
		return
	}
	d := u.devices[device]
	if d == nil {
		return
	}
	d.lastPush = lastPush
	if cursor > d.cursor {
		d.cursor = cursor
		k := deviceKey{uid, device}
		p.dirty[k] = max(p.dirty[k], cursor)
	}
}

// flush writes the advanced cursors in one transaction; on failure they wait for the next.
func (p *Pusher) flush(ctx context.Context) {
	p.mu.Lock()
	if len(p.dirty) == 0 {
		p.mu.Unlock()
		return
	}
	dirty := p.dirty
	p.dirty = make(map[deviceKey]int64)
	p.mu.Unlock()
	keys := make([]deviceKey, 0, len(dirty))
	for k := range dirty {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b deviceKey) int { // one order for every flush: rows locked in it
		return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.device, b.device))
	})
	err := p.o.Store.Update(ctx, func(tx store.Tx) error {
		for _, k := range keys {
			if err := tx.AdvancePushCursor(ctx, k.user, k.device, dirty[k]); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil { // stopping: the last flush, on a live context, writes them
			p.o.Log.Error("push: write cursors", "devices", len(keys), "err", err)
		}
		p.mu.Lock()
		for k, c := range dirty {
			p.dirty[k] = max(p.dirty[k], c)
		}
		p.mu.Unlock()
	}
}
