package push

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfter reads the Retry-After header of a 429 or 503, in either of its forms
// (delay-seconds or an HTTP date, RFC 9110 §10.2.3), as a delay from now. It lives here, once,
// because every provider's answer carries it the same way. It returns zero when the header
// is absent, malformed or names a moment already past: the pusher's backoff applies then.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// A day is far beyond any provider's real answer; the cap keeps a garbled header
		// from parking a device forever (and the multiplication from overflowing).
		return min(time.Duration(secs)*time.Second, 24*time.Hour)
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), 24*time.Hour)
	}
	return 0
}
