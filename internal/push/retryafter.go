package push

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps every provider's Retry-After: a day, the default GiveUpAfter, is far
// beyond any real answer, so a longer one is a garbled header that would otherwise park a
// device past the point where its push is given up anyway.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter reads the Retry-After header of a 429 or 503, in either of its forms
// (delay-seconds or an HTTP date, RFC 9110 §10.2.3), as a delay from now. It lives here, once,
// because every provider's answer carries it the same way. It returns zero when the header
// is absent, malformed or names a moment already past: the pusher's backoff applies then.
// Every answer is at most MaxRetryAfter.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Capped in seconds first, so that the multiplication cannot overflow.
		return time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), MaxRetryAfter)
	}
	return 0
}
