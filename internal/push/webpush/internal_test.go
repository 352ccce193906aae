package webpush

import (
	"testing"
	"time"
)

func TestTTLSeconds(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		exp  time.Time
		want int
	}{
		{time.Time{}, int(DefaultTTL / time.Second)},
		{now.Add(-time.Second), 0},
		{now, 0},
		{now.Add(1500 * time.Millisecond), 2},
		{now.Add(time.Hour), 3600},
	} {
		if got := ttlSeconds(tc.exp, now); got != tc.want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", tc.exp, got, tc.want)
		}
	}
}

func TestValidTopic(t *testing.T) {
	for s, want := range map[string]bool{
		"":                                  false,
		"c_general":                         true,
		"abc-DEF_123":                       true,
		"has space":                         false,
		"a/b":                               false,
		"0123456789012345678901234567890a":  true,
		"0123456789012345678901234567890ab": false,
	} {
		if got := validTopic(s); got != want {
			t.Errorf("validTopic(%q) = %v", s, got)
		}
	}
}

// TestEndpointOrigin: endpoints that reach the same service (case, a default port written or
// not, a trailing dot) are one origin, and another port is another origin.
func TestEndpointOrigin(t *testing.T) {
	for _, tc := range []struct{ endpoint, want string }{
		{"https://fcm.googleapis.com/fcm/send/abc", "https://fcm.googleapis.com:443"},
		{"https://FCM.googleapis.com.:443/fcm/send/def", "https://fcm.googleapis.com:443"},
		{"https://push.example:8443/x", "https://push.example:8443"},
		{"http://127.0.0.1/x", "http://127.0.0.1:80"},
		{"https://[2001:db8::1]/x", "https://[2001:db8::1]:443"},
	} {
		if got := endpointOrigin(tc.endpoint); got != tc.want {
			t.Errorf("endpointOrigin(%s) = %s, want %s", tc.endpoint, got, tc.want)
		}
	}
}
