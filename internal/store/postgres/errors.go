package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parleychat/parley/internal/store"
)

// SQLSTATE codes the backend reacts to.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03"
)

// translate turns a driver error into one wrapping a store sentinel, prefixed with what
// the caller was doing. Errors that already carry a sentinel or a context error pass
// unchanged.
//
// Everything that is not a statement's own answer is ErrUnavailable: a lost connection, a
// server shutting down, a deadlock or serialization failure (the transaction was rolled
// back and may simply be retried), a full disk. The caller cannot tell a broken
// connection's COMMIT from one that failed, so neither is reported as success.
func translate(err error, what string) error {
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("postgres: %s: %w", what, store.ErrNotFound)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExists),
		errors.Is(err, store.ErrUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pe) && pe.Code == codeUniqueViolation:
		return fmt.Errorf("postgres: %s: %w: %v", what, store.ErrExists, err)
	case errors.As(err, &pe) && !unavailableClass(pe.Code):
		return fmt.Errorf("postgres: %s: %w", what, err) // a bug in a statement, not an outage
	}
	return fmt.Errorf("postgres: %s: %w: %w", what, store.ErrUnavailable, err)
}

// unavailableClass reports the SQLSTATEs after which the transaction is gone but the
// request may succeed later: transaction rollback (40: serialization, deadlock),
// insufficient resources (53), operator intervention (57: shutdown, cancel), system
// errors (58), lock not available, and connection exceptions (08).
func unavailableClass(code string) bool {
	switch code[:2] {
	case "08", "40", "53", "57", "58":
		return true
	}
	return code == codeLockNotAvailable
}

// retryable reports an error after which a transaction that was rolled back as a whole
// may be run again and succeed: a deadlock or serialization failure, or a unique key taken
// by a concurrent transaction that committed while this one waited.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case codeSerializationFailure, codeDeadlockDetected, codeUniqueViolation:
		return true
	}
	return false
}

// unavailable is the error of a call on a closed store.
func unavailable(what string) error {
	return fmt.Errorf("postgres: %s: store closed: %w", what, store.ErrUnavailable)
}
