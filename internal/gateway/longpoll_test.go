package gateway

import (
	"net/http"
	"testing"

	"github.com/parleychat/parley/internal/chat"
)

// TestLongPollsReplaceAndRelease: a device's new long-poll cancels its previous one, whose
// late release does not free its successor's slot; the per-user cap counts devices; and
// once every long-poll is released nothing is left tracked.
func TestLongPollsReplaceAndRelease(t *testing.T) {
	l := newLongPolls(2)
	cancelled := 0
	cancel := func() { cancelled++ }
	must := func(id chat.Identity) func() {
		t.Helper()
		release, err := l.begin(id, cancel)
		if err != nil {
			t.Fatalf("begin %v: %v", id, err)
		}
		return release
	}
	phone, tablet, laptop := chat.Identity{UserID: "a", DeviceID: "phone"}, chat.Identity{UserID: "a", DeviceID: "tablet"}, chat.Identity{UserID: "a", DeviceID: "laptop"}

	first := must(phone)
	second := must(phone)
	if cancelled != 1 {
		t.Fatalf("the replaced long-poll was cancelled %d times, want once", cancelled)
	}
	first() // the replaced one answers after its successor started
	releaseTablet := must(tablet)
	if _, err := l.begin(laptop, cancel); statusOf(err) != http.StatusTooManyRequests || retryAfterOf(err) < 1 {
		t.Fatalf("third device: %v (status %d), want 429 with a Retry-After", err, statusOf(err))
	}
	releaseOther := must(chat.Identity{UserID: "b", DeviceID: "phone"}) // another user's cap is its own
	second()
	releaseLaptop := must(laptop)
	for _, release := range []func(){releaseTablet, releaseOther, releaseLaptop} {
		release()
	}
	if len(l.users) != 0 {
		t.Fatalf("long-polls still tracked after every release: %v", l.users)
	}
}
