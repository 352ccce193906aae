package sqlite

import (
	"context"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/sqlrow"
)

// PushTarget implements store.PushReader.
func (t readTx) PushTarget(ctx context.Context, userID, deviceID string) (store.PushTarget, error) {
	p, err := sqlrow.PushTarget(t.q.queryRow(ctx, stPushTarget, userID, deviceID))
	if err != nil {
		return store.PushTarget{}, t.q.fail(err, "push target %q of user %q", deviceID, userID)
	}
	return p, nil
}

// PushTargets implements store.PushReader.
func (t readTx) PushTargets(ctx context.Context, userID string) ([]store.PushTarget, error) {
	return queryAll(ctx, t.q, sqlrow.PushTarget, stPushTargets, []any{userID}, "push targets of user %q", userID)
}

// PushTargetsAfter implements store.PushReader, by the primary key.
func (t readTx) PushTargetsAfter(ctx context.Context, afterUser, afterDevice string, limit int) ([]store.PushTarget, error) {
	return queryAll(ctx, t.q, sqlrow.PushTarget, stPushTargetsAfter, []any{afterUser, afterDevice, max(limit, 0)},
		"push targets after %q/%q", afterUser, afterDevice)
}

// Mutes implements store.PushReader.
func (t readTx) Mutes(ctx context.Context, userID string) ([]store.Mute, error) {
	return queryAll(ctx, t.q, sqlrow.Mute, stMutes, []any{userID}, "mutes of user %q", userID)
}

// PutPushTarget implements store.PushWriter.
func (t writeTx) PutPushTarget(ctx context.Context, p store.PushTarget) error {
	_, err := t.q.exec(ctx, stPutPushTarget, p.UserID, p.DeviceID, p.Provider, p.Token, p.Topic,
		p.Locale, p.RegisteredAt, p.Cursor)
	if err != nil {
		return t.q.fail(err, "put push target %q of user %q", p.DeviceID, p.UserID)
	}
	return nil
}

// DeletePushTarget implements store.PushWriter.
func (t writeTx) DeletePushTarget(ctx context.Context, userID, deviceID string) error {
	res, err := t.q.exec(ctx, stDeletePushTarget, userID, deviceID)
	return t.expectOne(res, err, "delete push target %q of user %q", deviceID, userID)
}

// AdvancePushCursor implements store.PushWriter: max() in the UPDATE, so the cursor never
// moves back; the row counts as updated even when it stays, so no row means no target.
func (t writeTx) AdvancePushCursor(ctx context.Context, userID, deviceID string, cursor int64) error {
	res, err := t.q.exec(ctx, stAdvancePushCursor, cursor, userID, deviceID)
	return t.expectOne(res, err, "advance push cursor of device %q of user %q", deviceID, userID)
}

// PutMute implements store.PushWriter.
func (t writeTx) PutMute(ctx context.Context, m store.Mute) error {
	if _, err := t.q.exec(ctx, stPutMute, m.UserID, m.ConvID, m.Until); err != nil {
		return t.q.fail(err, "put mute of conversation %q for user %q", m.ConvID, m.UserID)
	}
	return nil
}

// DeleteMute implements store.PushWriter.
func (t writeTx) DeleteMute(ctx context.Context, userID, convID string) error {
	res, err := t.q.exec(ctx, stDeleteMute, userID, convID)
	return t.expectOne(res, err, "delete mute of conversation %q for user %q", convID, userID)
}

// queryAll runs the statement id with args and scans every row with scan; format and
// fargs describe the read in an error.
func queryAll[T any](ctx context.Context, q runner, scan func(rowScanner) (T, error), id stmtID, args []any, format string, fargs ...any) ([]T, error) {
	rows, err := q.query(ctx, id, args...)
	if err != nil {
		return nil, q.fail(err, format, fargs...)
	}
	out, err := collect(rows, scan)
	if err != nil {
		return nil, q.fail(err, format, fargs...)
	}
	return out, nil
}
