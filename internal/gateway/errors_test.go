package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/parleychat/parley/internal/chat"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
	}{
		{"nil", nil, 200},
		{"invalid", chat.ErrInvalid, 400},
		{"wrapped invalid", fmt.Errorf("%w: seq is required", chat.ErrInvalid), 400},
		{"unauthorized", fmt.Errorf("%w: token expired", chat.ErrUnauthorized), 401},
		{"forbidden", fmt.Errorf("%w: not a member", chat.ErrForbidden), 403},
		{"not found", fmt.Errorf("%w: no such user", chat.ErrNotFound), 404},
		{"conflict", fmt.Errorf("%w: cursor ahead", chat.ErrConflict), 409},
		{"gone", fmt.Errorf("%w: cursor expired", chat.ErrGone), 410},
		{"too large", fmt.Errorf("%w: 70000 bytes", chat.ErrTooLarge), 413},
		{"unavailable", fmt.Errorf("%w: commit failed", chat.ErrUnavailable), 503},
		{"doubly wrapped", fmt.Errorf("outer: %w", fmt.Errorf("%w: x", chat.ErrForbidden)), 403},
		{"draining", errDraining, 503},
		{"rate limited", &rateLimitError{what: "send", retryAfter: 3}, 429},
		{"no route", &statusError{code: 404, msg: "no such endpoint"}, 404},
		{"wrong method", &statusError{code: 405, msg: "method not allowed"}, 405},
		{"cancelled", context.Canceled, 503},
		{"deadline", fmt.Errorf("store: %w", context.DeadlineExceeded), 503},
		{"unknown", errors.New("disk on fire"), 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statusOf(tt.err); got != tt.code {
				t.Fatalf("statusOf(%v) = %d, want %d", tt.err, got, tt.code)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	if got := errorMessage(errors.New("secret path /var/x"), http.StatusInternalServerError); got != "internal error" {
		t.Fatalf("500 leaks its cause: %q", got)
	}
	store := fmt.Errorf("%w: send: postgres: insert message: ERROR: relation \"messages\" does not exist (SQLSTATE 42P01)", chat.ErrUnavailable)
	if got := errorMessage(store, statusOf(store)); got != reasonUnavailable {
		t.Fatalf("a store failure's 503 says %q, want %q", got, reasonUnavailable)
	}
	if got := errorMessage(errDraining, statusOf(errDraining)); got != errDraining.Error() {
		t.Fatalf("draining says %q, want its own reason %q", got, errDraining.Error())
	}
	err := fmt.Errorf("%w: not a member", chat.ErrForbidden)
	if got := errorMessage(err, 403); got != "forbidden: not a member" {
		t.Fatalf("got %q", got)
	}
	if got := retryAfterOf(&rateLimitError{what: "request", retryAfter: 2}); got != 2 {
		t.Fatalf("retry after %d", got)
	}
	if got := retryAfterOf(err); got != 0 {
		t.Fatalf("retry after %d for a 403", got)
	}
}
