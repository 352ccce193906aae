// Package bus carries small wake-ups between Parley nodes: "user U has something new at
// cursor C", "conversation X changed". It never carries state that the durable log does not
// already hold, so its delivery can be at most once: a lost wake-up only delays an event until
// the reader's next sync, which fills gaps by cursor.
//
// Two implementations share one contract, checked by the bustest suite: Memory (in process,
// the single-node default) and NATS (core NATS, between nodes). Seal wraps either so that
// what goes over it is sealed with a cluster key that only the nodes hold, and passes the
// same suite.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Bus publishes messages on subjects and delivers them to the subscribers of that subject.
//
// Guarantees, for every implementation:
//   - Delivery is at most once: a message may be lost (a full subscriber queue, a
//     disconnection), never duplicated by the bus. Callers must not rely on the bus for
//     anything the durable log cannot reproduce.
//   - A subscription's handler is called one message at a time, never concurrently with
//     itself, and messages from one publisher (one Bus value) reach it in publish order.
//     Different subscriptions are called concurrently.
//   - Publish never blocks on slow subscribers: a subscriber that falls behind loses
//     messages (see each implementation for which ones), the publisher does not wait.
//
// All methods are safe for concurrent use.
type Bus interface {
	// Publish sends data to the current subscribers of subject. It returns once the message
	// is handed to the transport: nil does not mean anyone received it. It returns an error
	// wrapping ErrInvalidSubject for a malformed subject, ErrClosed after Close, ctx's error if
	// ctx is done, and an error wrapping ErrUnavailable when the transport cannot take the
	// message now (the caller degrades to the readers' next sync). The bus does not keep data
	// after Publish returns, so the caller may reuse it.
	Publish(ctx context.Context, subject string, data []byte) error

	// Subscribe calls handler with the data of each message published on subject (an exact
	// subject: there are no wildcards) until the subscription is ended. handler must not
	// block for long, since it delays the subscription's later messages, and it must not
	// keep or modify data after it returns. Subscribe returns an error wrapping
	// ErrInvalidSubject for a malformed subject and ErrClosed after Close.
	Subscribe(subject string, handler func(data []byte)) (Subscription, error)

	// Close ends every subscription and releases the bus. Later calls to Publish and
	// Subscribe return ErrClosed; a second Close returns nil.
	Close() error
}

// Subscription is one handler's interest in one subject.
type Subscription interface {
	// Unsubscribe stops delivery: a message published after Unsubscribe returns is never
	// passed to the handler (a call already running may finish). It does not wait for that
	// call, so a handler may unsubscribe itself. A second call, or a call after the bus is
	// closed, returns nil.
	Unsubscribe() error
}

var (
	// ErrInvalidSubject is returned for a subject that is not dot-separated tokens of
	// [A-Za-z0-9_-].
	ErrInvalidSubject = errors.New("bus: invalid subject")
	// ErrClosed is returned by a bus that was closed.
	ErrClosed = errors.New("bus: closed")
	// ErrUnavailable is returned by Publish when the transport cannot take the message now,
	// for example while NATS is disconnected.
	ErrUnavailable = errors.New("bus: unavailable")
)

// MaxSubjectLen is the longest subject accepted, in bytes.
const MaxSubjectLen = 256

// ValidateSubject returns nil when s is 1 to MaxSubjectLen bytes of non-empty tokens of
// [A-Za-z0-9_-] separated by single dots, and an error wrapping ErrInvalidSubject otherwise.
func ValidateSubject(s string) error {
	if s == "" || len(s) > MaxSubjectLen {
		return fmt.Errorf("%w %q: must be 1-%d bytes", ErrInvalidSubject, s, MaxSubjectLen)
	}
	// Byte by byte rather than by strings.Split: every publish checks its subject, twice on
	// a sealed bus, and a split allocates.
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if i == start {
				return fmt.Errorf("%w %q: empty token", ErrInvalidSubject, s)
			}
			start = i + 1
			continue
		}
		if !tokenChar(s[i]) {
			return fmt.Errorf("%w %q: tokens are [A-Za-z0-9_-], found %q", ErrInvalidSubject, s, s[i])
		}
	}
	return nil
}

// checkPublish holds the checks every implementation makes before publishing.
func checkPublish(ctx context.Context, subject string) error {
	if err := ValidateSubject(subject); err != nil {
		return err
	}
	return ctx.Err()
}

// checkSubscribe holds the checks every implementation makes before subscribing.
func checkSubscribe(subject string, handler func([]byte)) error {
	if handler == nil {
		return errors.New("bus: nil handler")
	}
	return ValidateSubject(subject)
}

func tokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// UserSubject is the subject of wake-ups for one user's devices: "parley.user.<id>".
func UserSubject(userID string) string { return "parley.user." + Token(userID) }

// ConvSubject is the subject of notices about one conversation: "parley.conv.<id>".
func ConvSubject(convID string) string { return "parley.conv." + Token(convID) }

// Token encodes an id as one subject token. User ids may hold '.' and '@', which are not
// token characters, so Token escapes every byte outside [A-Za-z0-9-] as '_' and two upper-case
// hex digits ("a.b_c" becomes "a_2Eb_5Fc"). The encoding is one-to-one, so two ids never
// share a subject; ids made of [A-Za-z0-9-] are unchanged. An empty id gives an empty token,
// which Publish and Subscribe refuse.
func Token(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c != '_' && tokenChar(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02X", c)
	}
	return b.String()
}
