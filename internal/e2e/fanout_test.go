package e2e

import (
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// bigGroup creates size-1 members through the admin API (they need only exist) and a group
// of them owned by a new user, whose token it returns with the conv_id.
func bigGroup(t *testing.T, n *node, size int) (owner, convID string) {
	t.Helper()
	members := make([]string, size-1)
	for i := range members {
		members[i] = fmt.Sprintf("member-%d", i)
		n.MustDo(t, "POST", "/v1/admin/users", n.AdminSecret, map[string]string{"user_id": members[i]}, nil)
	}
	owner = n.user(t, "owner")
	return owner, n.group(t, owner, "big", false, members...)["conv_id"].(string)
}

// attackLoop runs call in a loop on workers goroutines until stop is called, counting the
// answers by status. A 429 must carry Retry-After and the {"code","error"} body.
type attackLoop struct {
	mu       sync.Mutex // guards statuses and bad
	statuses map[int]int
	bad      string        // the first malformed 429, if any
	refused  chan struct{} // closed at the first 429
	stopped  chan struct{}
	done     chan struct{}
	elapsed  time.Duration // set before done is closed
}

func startAttack(workers int, call func(i int) (response, error)) *attackLoop {
	a := &attackLoop{statuses: map[int]int{}, refused: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
	var calls atomic.Int64
	go func() {
		defer close(a.done)
		begin := time.Now()
		defer func() { a.elapsed = time.Since(begin) }()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					select {
					case <-a.stopped:
						return
					default:
					}
					r, err := call(int(calls.Add(1)))
					a.record(r, err)
				}
			})
		}
		wg.Wait()
	}()
	return a
}

func (a *attackLoop) record(r response, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.statuses[-1]++
		return
	}
	a.statuses[r.status]++
	if r.status == http.StatusTooManyRequests && a.statuses[r.status] == 1 {
		close(a.refused)
		if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 1 {
			a.bad = fmt.Sprintf("429 without a Retry-After of at least 1 s: %q %s", r.header.Get("Retry-After"), r.raw)
		} else if m, err := decode(r.raw); err != nil || num(m["code"]) != 429 || m["error"] == "" {
			a.bad = fmt.Sprintf("429 body %s", r.raw)
		}
	}
}

// limited waits for the first 429: the burst the limits allow is over, and the attack goes
// on being refused. Bystanders are measured from then on, as the limits bound the sustained
// rate (the burst itself, 5,000 events and more, delays others' sends for up to a second).
func (a *attackLoop) limited(t *testing.T) {
	t.Helper()
	// Reaching the first 429 takes a few renames of a 500-member group, each seconds long
	// under -race on a loaded machine: the wait is bounded generously, never slept.
	select {
	case <-a.refused:
	case <-time.After(6 * deadline):
		t.Fatalf("no 429 within %v", 6*deadline)
	}
}

// stop ends the loop and returns the count of each status (-1: transport errors).
func (a *attackLoop) stop(t *testing.T) map[int]int {
	t.Helper()
	close(a.stopped)
	select {
	case <-a.done:
	case <-time.After(deadline):
		t.Fatal("the attack loop did not stop")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bad != "" {
		t.Error(a.bad)
	}
	t.Logf("attack answers by status over %v: %v", a.elapsed, a.statuses)
	return a.statuses
}

// wantAllowed stops the loop and checks that at most burst calls, then one per every,
// succeeded.
func (a *attackLoop) wantAllowed(t *testing.T, what string, burst int, every time.Duration) {
	t.Helper()
	ok := a.stop(t)[http.StatusOK]
	if max := burst + int(a.elapsed/every) + 1; ok > max {
		t.Errorf("%d %s succeeded in %v, want at most %d", ok, what, a.elapsed, max)
	}
}

// forged returns token with its signature's last characters replaced: the same length and
// claims, refused with 401.
func forged(token string) string {
	sig := token[strings.LastIndexByte(token, '.')+1:]
	repl := "AAAA"
	if strings.HasSuffix(sig, repl) {
		repl = "BBBB"
	}
	return token[:len(token)-len(repl)] + repl
}

// TestAttackRenameFanout performs attack 5 of issue 7: one device renames a 500-member group
// in a loop, each rename writing 500 events. Refusals (429) must come, the events created
// must stay within the budget, and a bystander's direct sends must be unaffected.
func TestAttackRenameFanout(t *testing.T) {
	const size = 500
	rename := func(n *node, owner, convID string) func(i int) (response, error) {
		return func(i int) (response, error) {
			return n.request("PATCH", "/v1/conversations/"+convID, owner, map[string]any{"name": fmt.Sprintf("name-%d", i)})
		}
	}
	// Calls of one device side by side must not all be admitted before any is weighed.
	for _, workers := range []int{1, 8} {
		t.Run(fmt.Sprintf("fanout limit, %d at a time", workers), func(t *testing.T) {
			const rate, burst = 250, 1000 // events/s, scaled down so a short test can tell
			n := start(t, func(c *server.Config) {
				c.Gateway.FanoutRate, c.Gateway.FanoutBurst = rate, burst
				c.Gateway.ConvChangeEvery = 0 // the fanout limit alone
			})
			owner, convID := bigGroup(t, n, size)
			by := newBystander(t, n, "by")
			// The same renames with a forged token: refused (401) before the body, as the
			// attack's are (429) once limited.
			base := by.baselineUnder(t, workers, rename(n, forged(owner), convID))
			before := n.metric(t, "parley_events_committed_total")
			sentBefore := by.sent.Load()
			a := startAttack(workers, rename(n, owner, convID))
			a.limited(t)
			by.unaffected(t, "renaming a 500-member group", base)
			a.stop(t)
			events := n.metric(t, "parley_events_committed_total") - before - 2*float64(by.sent.Load()-sentBefore)
			// The budget: the burst, the refill, and the overdraw of the one call admitted
			// while the bucket was not yet in debt. The group's creation (size events) came
			// first.
			budget := burst + rate*a.elapsed.Seconds() + size
			if events > budget {
				t.Errorf("the renames created %.0f events in %v, want at most %.0f", events, a.elapsed, budget)
			}
		})
	}
	t.Run("conversation change limit", func(t *testing.T) {
		n := start(t)                       // defaults: 10 changes, then 1 per 6 s
		owner, convID := bigGroup(t, n, 50) // the limit does not depend on the size
		by := newBystander(t, n, "by")
		base := by.baseline(t)
		a := startAttack(1, rename(n, owner, convID))
		a.limited(t)
		by.unaffected(t, "renaming a group", base)
		a.wantAllowed(t, "renames", 10, 6*time.Second)
		// The limit is the conversation's: leaving is never refused.
		n.ok(t, "POST", "/v1/conversations/"+convID+"/members", n.Token(t, "member-0", "d1"), map[string]any{"remove": []string{"member-0"}})
	})
}

// TestAttackGroupCreation: one user creates groups in a loop. Past the creation limit
// (defaults: 20, then 1 per 10 s) they get 429; a bystander is unaffected.
func TestAttackGroupCreation(t *testing.T) {
	parleytest.OneNode(t, "per-user limits are kept per node (docs/design.md, \"Several nodes\")")
	n := start(t)
	n.user(t, "member")
	mallory := n.user(t, "mallory")
	by := newBystander(t, n, "by")
	base := by.baseline(t)
	a := startAttack(1, func(int) (response, error) {
		return n.request("POST", "/v1/conversations", mallory, map[string]any{"type": "group", "name": "spam", "members": []string{"member"}})
	})
	a.limited(t)
	by.unaffected(t, "creating groups in a loop", base)
	a.wantAllowed(t, "group creations", 20, 10*time.Second)
	// The limit is the user's, on every device; another user still creates.
	n.fail(t, http.StatusTooManyRequests, "POST", "/v1/conversations", n.Token(t, "mallory", "tablet"), map[string]any{"type": "direct", "peer_id": "member"})
	convID := n.direct(t, n.Token(t, "member", "d1"), "mallory")["conv_id"]
	// Asking for a direct conversation that exists creates nothing: never refused.
	if got := n.direct(t, mallory, "member")["conv_id"]; got != convID {
		t.Fatalf("mallory's direct conversation with member is %v, want %v", got, convID)
	}
}

// TestConvChangeLimitCountsChanges: only real changes spend a conversation's change budget
// (defaults: 10, then 1 per 6 s). A non-member's refused renames and renames to the current
// name do not, so an outsider cannot lock a group's owner out.
func TestConvChangeLimitCountsChanges(t *testing.T) {
	n := start(t)
	owner := n.user(t, "owner")
	n.user(t, "member")
	outsider := n.user(t, "outsider")
	convID := n.group(t, owner, "g", false, "member")["conv_id"].(string)
	path := "/v1/conversations/" + convID
	for i := range 15 {
		if r := n.call(t, "PATCH", path, outsider, map[string]any{"name": fmt.Sprint(i)}); r.status == http.StatusOK || r.status == http.StatusTooManyRequests {
			t.Fatalf("outsider's rename = %d %s", r.status, r.raw)
		}
		n.ok(t, "PATCH", path, owner, map[string]any{"name": "g"})
	}
	for i := range 10 {
		n.ok(t, "PATCH", path, owner, map[string]any{"name": fmt.Sprint(i)})
	}
	r := n.fail(t, http.StatusTooManyRequests, "PATCH", path, owner, map[string]any{"name": "one too many"})
	if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s < 1 || s > 6 {
		t.Fatalf("Retry-After %q, want 1..6", r.header.Get("Retry-After"))
	}
}

// TestFanoutLimitOnWebSocket: send frames into a group are weighed by their events too; once
// the device's events bucket is in debt, the next frame gets a 429 reply with retry_after
// and the connection stays open.
func TestFanoutLimitOnWebSocket(t *testing.T) {
	n := start(t, func(c *server.Config) { c.Gateway.FanoutRate, c.Gateway.FanoutBurst = 10, 50 })
	owner, convID := bigGroup(t, n, 20) // 20 events per send; the creation took 20 of 50
	ws := n.dial(t, owner, -1)
	for i := range 2 { // 20 events each: the second overdraws the bucket to -10
		if r := ws.do("send", textMessage(convID, fmt.Sprint(i))); num(r["code"]) != 0 {
			t.Fatalf("send %d: %s", i, show(r))
		}
	}
	r := ws.do("send", textMessage(convID, "refused"))
	wantFields(t, "send while in debt", r, map[string]any{"code": 429})
	if s := num(r["retry_after"]); s < 1 || s > 2 {
		t.Fatalf("retry_after %d, want 1..2 (10 events owed at 10/s)", s)
	}
	// Any frame is refused while in debt, and the connection stays open.
	wantFields(t, "ping while in debt", ws.do("ping", nil), map[string]any{"code": 429})
}
