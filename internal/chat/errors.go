package chat

import "errors"

// Domain errors. Every error a Service method returns wraps exactly one of these (with a
// human-readable reason); the gateway maps them to wire codes in one table.
var (
	ErrInvalid      = errors.New("invalid request")      // 400
	ErrUnauthorized = errors.New("not authenticated")    // 401
	ErrForbidden    = errors.New("forbidden")            // 403
	ErrNotFound     = errors.New("not found")            // 404
	ErrConflict     = errors.New("conflict")             // 409
	ErrGone         = errors.New("gone")                 // 410
	ErrTooLarge     = errors.New("too large")            // 413
	ErrQuota        = errors.New("quota exceeded")       // 429
	ErrUnavailable  = errors.New("not persisted, retry") // 503
)
