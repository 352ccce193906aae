package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/parleychat/parley/internal/chat"
)

// statusError is an HTTP condition the gateway itself detects (no route, wrong method, a
// failed upgrade handshake): it carries its own code.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// rateLimitError answers 429; retryAfter is how long until the request would be allowed.
type rateLimitError struct {
	what       string // which limit, as a phrase: "too many sends from this device"
	retryAfter int    // whole seconds, at least 1
}

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("rate limited: %s, retry after %d s", e.what, e.retryAfter)
}

// Errors of the gateway that map through the table below.
var (
	errDraining = fmt.Errorf("%w: server is shutting down", chat.ErrUnavailable)
	errInternal = errors.New("internal error")
)

// statusOf is the one table mapping an error to its wire code (the HTTP status, and the
// "code" of a WebSocket reply). Chat's sentinel errors are matched with errors.Is, so any
// wrapping keeps its code. Anything unknown is 500; callers log those.
func statusOf(err error) int {
	var se *statusError
	var rl *rateLimitError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &rl):
		return http.StatusTooManyRequests
	case errors.As(err, &se):
		return se.code
	case errors.Is(err, chat.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, chat.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, chat.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, chat.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, chat.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, chat.ErrGone):
		return http.StatusGone
	case errors.Is(err, chat.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, chat.ErrQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, chat.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller went away or the server is draining: not a fault, and retrying is safe.
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Reasons sent in place of an error's own text, whose detail stays in the log.
const (
	reasonInternal    = "internal error"
	reasonCancelled   = "request cancelled, retry"
	reasonUnavailable = "not persisted, retry: store unavailable"
)

// errorMessage is the human-readable reason sent for err, whose code statusOf gave: its
// text, except where that text may come from below the domain. A 500 is a bug; a 503 other
// than the gateway's own draining is a store failure, whose text is the driver's (an SQL
// error, a table, a file path). Both get a fixed reason: chat logs the store's detail, and
// writeError the 500's.
func errorMessage(err error, code int) string {
	switch {
	case code == http.StatusInternalServerError:
		return reasonInternal
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return reasonCancelled
	case code == http.StatusServiceUnavailable && !errors.Is(err, errDraining):
		return reasonUnavailable
	}
	return err.Error()
}

// retryAfterOf returns the seconds a 429 asks the client to wait, or 0.
func retryAfterOf(err error) int {
	var rl *rateLimitError
	if errors.As(err, &rl) {
		return rl.retryAfter
	}
	return 0
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", chat.ErrInvalid, fmt.Sprintf(format, args...))
}

func unauthorized(reason string) error {
	return fmt.Errorf("%w: %s", chat.ErrUnauthorized, reason)
}
