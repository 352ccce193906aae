package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/parleychat/parley/protocol"
)

// Error is an answer of the server that is not a success: Code is the wire code of section 4
// (equal to the HTTP status), Message the server's reason. Use errors.As to inspect it, or
// ErrorCode for the code alone.
type Error struct {
	Code    int
	Message string
	// RetryAfter is how long the server asked the client to wait (429 only).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("parley: %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("parley: %d %s", e.Code, e.Message)
}

// ErrorCode returns the wire code of err if it is (or wraps) an *Error, and 0 otherwise.
func ErrorCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Errors of the session (Run, Connect).
var (
	// ErrReplaced: another connection of the same device took over (close code 4001). The
	// session stops instead of reconnecting, which would only evict the other one in turn.
	ErrReplaced = errors.New("parley: connection replaced by another one of the same device")
	// ErrRunning: the Client already has a session; a device keeps one connection.
	ErrRunning = errors.New("parley: session already running")
	// ErrNotConnected: the call needs the session's WebSocket, and none is open now.
	ErrNotConnected = errors.New("parley: not connected")
)

// errConnLost is returned to a request whose WebSocket ended before its reply arrived: the
// outcome is unknown, so a send must be retried with the same client_msg_id.
var errConnLost = errors.New("parley: connection lost before the reply")

// Close codes the session acts on: a connection evicted by a newer one of the same device,
// and one whose token was revoked or expired while it was open.
const (
	closeReplaced = 4001
	closeRevoked  = 4003
	closeExpired  = 4004
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// errorFromResponse builds the *Error of a non-2xx HTTP answer, reading the JSON body
// {"code","error"} if there is one and the Retry-After header of a 429.
func errorFromResponse(resp *http.Response) *Error {
	e := &Error{Code: resp.StatusCode}
	var body protocol.ErrorBody
	if data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody)); err == nil &&
		json.Unmarshal(data, &body) == nil {
		e.Message = body.Error
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// fatalForSession reports whether err ends a session rather than causing a reconnect: the
// token is no good (401) or the device may not connect (403).
func fatalForSession(err error) bool {
	code := ErrorCode(err)
	return code == http.StatusUnauthorized || code == http.StatusForbidden
}

// needsReset reports whether err says the cursor is unusable: too old (410) or ahead of the
// server (409). Either way the only sound continuation is a new snapshot.
func needsReset(err error) bool {
	code := ErrorCode(err)
	return code == http.StatusGone || code == http.StatusConflict
}
