package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// A bystander is a pair of users in a direct conversation who have nothing to do with an
// attack. Attack tests measure the bystander's send latency before the attack (the
// baseline) and while it runs, in the same test, and require the second to stay within a
// multiple of the first: "other users are unaffected" without a wall-clock constant.
type bystander struct {
	n      *node
	token  string
	convID string
	sent   atomic.Int64
}

// unaffectedFactor is how many times the baseline median the median during an attack may
// reach. Attacks this package performs made bystanders' sends 100 to 1,000 times slower
// before they were fixed; 10 leaves room for the attacker's own (refused) traffic sharing
// the machine's two cores.
const unaffectedFactor = 10

// newBystander creates two users named after prefix and their direct conversation.
func newBystander(t testing.TB, n *node, prefix string) *bystander {
	t.Helper()
	a, b := prefix+"-a", prefix+"-b"
	tok := n.user(t, a)
	n.user(t, b)
	conv := n.direct(t, tok, b)
	return &bystander{n: n, token: tok, convID: conv["conv_id"].(string)}
}

// median sends count messages one after another and returns the median latency. It fails
// the test on any answer but 200.
func (b *bystander) median(t testing.TB, count int) time.Duration {
	t.Helper()
	lat := make([]time.Duration, 0, count)
	for range count {
		id := fmt.Sprintf("by-%d", b.sent.Add(1))
		start := time.Now()
		r, err := b.n.request("POST", "/v1/messages", b.token, textMessage(b.convID, id))
		d := time.Since(start)
		if err != nil {
			t.Fatalf("bystander send: %v", err)
		}
		if r.status != 200 {
			t.Fatalf("bystander send = %d %s, want 200", r.status, r.raw)
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// baseline measures the bystander's median send latency before an attack. It is at least
// one millisecond, so that the bound does not become a timer resolution.
func (b *bystander) baseline(t testing.TB) time.Duration {
	t.Helper()
	b.median(t, 5) // warm up connections and caches
	return max(b.median(t, 21), time.Millisecond)
}

// baselineUnder measures the baseline while workers goroutines call refused in a loop: a
// flood of requests the server refuses at once, shaped like an attack's own refused traffic
// (the same number of callers, the same route and body). An attacker whose calls have been
// limited keeps sending them, and under -race on a loaded 2-core machine that alone takes
// the bystander from about 1 ms to 10-20 ms, on either engine; a baseline taken without it
// would charge that to the attack. Measured beside the same flood, the factor judges only
// what the attack's admitted calls cost others.
func (b *bystander) baselineUnder(t *testing.T, workers int, refused func(i int) (response, error)) time.Duration {
	t.Helper()
	flood := startAttack(workers, refused)
	base := b.baseline(t)
	statuses := flood.stop(t)
	if len(statuses) != 1 || statuses[http.StatusUnauthorized] == 0 {
		t.Fatalf("the flood beside the baseline was answered %v, want only 401s", statuses)
	}
	t.Logf("bystander send p50 %v beside %d callers refused at once", base, workers)
	return base
}

// unaffected measures the median again (during an attack) and fails the test if it exceeds
// unaffectedFactor times baseline.
func (b *bystander) unaffected(t testing.TB, what string, baseline time.Duration) {
	t.Helper()
	during := b.median(t, 21)
	t.Logf("%s: bystander send p50 %v during the attack, baseline %v", what, during, baseline)
	if during > unaffectedFactor*baseline {
		t.Errorf("%s: bystander send p50 went from %v to %v, more than %d times", what, baseline, during, unaffectedFactor)
	}
}
