package gateway

import (
	"context"
	"strconv"
	"sync"

	"github.com/parleychat/parley/internal/chat"
)

// longPolls tracks the waiting long-polls (GET /v1/sync with wait) of every user, so that
// one token cannot hold thousands of goroutines and file descriptors: a device has at most
// one (its new long-poll ends the previous one, which answers at once with what it has, as
// a client that re-polls expects) and a user at most limit, one per device.
type longPolls struct {
	limit int
	mu    sync.Mutex                      // guards users
	users map[string]map[string]*longPoll // user -> device -> its waiting long-poll
}

// longPollRetry is the Retry-After of a long-poll refused by the per-user cap, in seconds:
// a slot frees when one of the user's other long-polls answers, which may take up to
// protocol.MaxLongPollSecond, so there is no exact figure; 5 s keeps a refused device
// from spinning while not leaving it behind for long.
const longPollRetry = 5

// longPoll is one waiting long-poll; cancel ends its wait.
type longPoll struct{ cancel context.CancelFunc }

func newLongPolls(limit int) *longPolls {
	return &longPolls{limit: limit, users: make(map[string]map[string]*longPoll)}
}

// begin registers a long-poll of me whose wait cancel ends. It ends the device's previous
// long-poll, or refuses with 429 when the user already has limit others waiting. The
// caller must call release once the long-poll has answered.
func (l *longPolls) begin(me chat.Identity, cancel context.CancelFunc) (release func(), err error) {
	p := &longPoll{cancel: cancel}
	l.mu.Lock()
	defer l.mu.Unlock()
	devices := l.users[me.UserID]
	prev, replacing := devices[me.DeviceID]
	if !replacing && len(devices) >= l.limit {
		return nil, &rateLimitError{what: "too many waiting long-polls from this user (one per device, at most " + strconv.Itoa(l.limit) + ")", retryAfter: longPollRetry}
	}
	if replacing {
		prev.cancel()
	}
	if devices == nil {
		devices = make(map[string]*longPoll)
		l.users[me.UserID] = devices
	}
	devices[me.DeviceID] = p
	return func() { l.end(me, p) }, nil
}

// end forgets p unless a newer long-poll of the same device replaced it already.
func (l *longPolls) end(me chat.Identity, p *longPoll) {
	l.mu.Lock()
	defer l.mu.Unlock()
	devices := l.users[me.UserID]
	if devices[me.DeviceID] != p {
		return
	}
	delete(devices, me.DeviceID)
	if len(devices) == 0 {
		delete(l.users, me.UserID)
	}
}
