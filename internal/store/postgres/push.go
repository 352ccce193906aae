package postgres

import (
	"context"
	"fmt"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// Column lists of the push tables, in the order sqlrow reads them.
const (
	pushCols = `user_id, device_id, provider, token, topic, locale, registered_at, cursor`
	muteCols = `user_id, conv_id, until`
)

// PushTarget implements store.PushReader. In an Update it locks the row, as the other
// point reads do (see readTx.lock).
func (t readTx) PushTarget(ctx context.Context, userID, deviceID string) (store.PushTarget, error) {
	p, err := sqlrow.PushTarget(t.tx.QueryRow(ctx, `SELECT `+pushCols+` FROM push_targets
		WHERE user_id = $1 AND device_id = $2`+t.lock, userID, deviceID))
	if err != nil {
		return store.PushTarget{}, translate(err, fmt.Sprintf("push target %q of user %q", deviceID, userID))
	}
	return p, nil
}

// PushTargets implements store.PushReader.
func (t readTx) PushTargets(ctx context.Context, userID string) ([]store.PushTarget, error) {
	return collect(ctx, t.tx, sqlrow.PushTarget, fmt.Sprintf("push targets of user %q", userID),
		`SELECT `+pushCols+` FROM push_targets WHERE user_id = $1 ORDER BY device_id`, userID)
}

// PushTargetsAfter implements store.PushReader, by the primary key.
func (t readTx) PushTargetsAfter(ctx context.Context, afterUser, afterDevice string, limit int) ([]store.PushTarget, error) {
	return collect(ctx, t.tx, sqlrow.PushTarget, fmt.Sprintf("push targets after %q/%q", afterUser, afterDevice),
		`SELECT `+pushCols+` FROM push_targets WHERE (user_id, device_id) > ($1, $2)
		ORDER BY user_id, device_id LIMIT $3`, afterUser, afterDevice, max(limit, 0))
}

// Mutes implements store.PushReader.
func (t readTx) Mutes(ctx context.Context, userID string) ([]store.Mute, error) {
	return collect(ctx, t.tx, sqlrow.Mute, fmt.Sprintf("mutes of user %q", userID),
		`SELECT `+muteCols+` FROM mutes WHERE user_id = $1 ORDER BY conv_id`, userID)
}

// PutPushTarget implements store.PushWriter.
func (t writeTx) PutPushTarget(ctx context.Context, p store.PushTarget) error {
	return t.upsert(ctx, fmt.Sprintf("put push target %q of user %q", p.DeviceID, p.UserID),
		`INSERT INTO push_targets (`+pushCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (user_id, device_id) DO UPDATE SET provider = excluded.provider,
		token = excluded.token, topic = excluded.topic, locale = excluded.locale,
		registered_at = excluded.registered_at, cursor = excluded.cursor`,
		p.UserID, p.DeviceID, p.Provider, p.Token, p.Topic, p.Locale, p.RegisteredAt, p.Cursor)
}

// DeletePushTarget implements store.PushWriter.
func (t writeTx) DeletePushTarget(ctx context.Context, userID, deviceID string) error {
	tag, err := t.tx.Exec(ctx, `DELETE FROM push_targets WHERE user_id = $1 AND device_id = $2`, userID, deviceID)
	return expectOne(tag, err, store.ErrNotFound, "delete push target %q of user %q", deviceID, userID)
}

// AdvancePushCursor implements store.PushWriter: GREATEST in the UPDATE itself, so no
// writer on any node moves the cursor back whatever it read. The row counts as updated
// even when it stays, so no row means no target.
func (t writeTx) AdvancePushCursor(ctx context.Context, userID, deviceID string, cursor int64) error {
	tag, err := t.tx.Exec(ctx, `UPDATE push_targets SET cursor = GREATEST(cursor, $1)
		WHERE user_id = $2 AND device_id = $3`, cursor, userID, deviceID)
	return expectOne(tag, err, store.ErrNotFound, "advance push cursor of device %q of user %q", deviceID, userID)
}

// PutMute implements store.PushWriter.
func (t writeTx) PutMute(ctx context.Context, m store.Mute) error {
	return t.upsert(ctx, fmt.Sprintf("put mute of conversation %q for user %q", m.ConvID, m.UserID),
		`INSERT INTO mutes (`+muteCols+`) VALUES ($1, $2, $3)
		ON CONFLICT (user_id, conv_id) DO UPDATE SET until = excluded.until`, m.UserID, m.ConvID, m.Until)
}

// DeleteMute implements store.PushWriter.
func (t writeTx) DeleteMute(ctx context.Context, userID, convID string) error {
	tag, err := t.tx.Exec(ctx, `DELETE FROM mutes WHERE user_id = $1 AND conv_id = $2`, userID, convID)
	return expectOne(tag, err, store.ErrNotFound, "delete mute of conversation %q for user %q", convID, userID)
}

// upsert runs an INSERT ... ON CONFLICT DO UPDATE, which touches one row whether it
// inserts or overwrites; what describes it in an error.
func (t writeTx) upsert(ctx context.Context, what, sql string, args ...any) error {
	if _, err := t.tx.Exec(ctx, sql, args...); err != nil {
		return translate(err, what)
	}
	return nil
}
