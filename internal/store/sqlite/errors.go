package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/parleychat/parley/internal/store"
)

// translate turns a driver error into one wrapping a store sentinel, prefixed with what
// the caller was doing. Errors that already carry a sentinel or a context error pass
// unchanged, so a translated error never gets translated twice.
func translate(err error, what string) error {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlite: %s: %w", what, store.ErrNotFound)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExists),
		errors.Is(err, store.ErrUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case isUniqueViolation(err):
		return fmt.Errorf("sqlite: %s: %w: %v", what, store.ErrExists, err)
	case isUnavailable(err):
		return fmt.Errorf("sqlite: %s: %w: %w", what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// isUniqueViolation reports a primary-key or unique-index conflict. Other constraint
// failures (NOT NULL, CHECK) are bugs, not conflicts, and are not reported as ErrExists.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isUnavailable reports errors after which the transaction cannot be trusted to commit:
// I/O, full disk, lock timeouts, corruption, interruption, and a closed pool. SQLite
// rolls back the whole transaction on several of these, which is why the writer stops its
// batch on them.
func isUnavailable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED,
			sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_ABORT,
			sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	// database/sql reports a closed pool only through an unexported error.
	return errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) ||
		strings.Contains(err.Error(), "sql: database is closed") ||
		strings.Contains(err.Error(), "sql: statement is closed")
}

// unavailable is the error of a call on a closed store.
func unavailable(what string) error {
	return fmt.Errorf("sqlite: %s: store closed: %w", what, store.ErrUnavailable)
}
