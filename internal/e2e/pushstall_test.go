package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
)

// withLoopbackWebPush lets the node push to Web Push endpoints on this machine (the fakes).
func withLoopbackWebPush(c *server.Config) {
	c.Push.WebPush, c.Push.AllowPrivate = true, true
	c.Gateway.SendRate, c.Gateway.FanoutRate, c.Gateway.RequestRate = 0, 0, 0
}

// registerWebPush registers token's device for Web Push with subscription (its JSON).
func (n *node) registerWebPush(tb testing.TB, token, subscription string) {
	tb.Helper()
	n.ok(tb, "PUT", "/v1/push/device", token, map[string]any{"provider": "webpush", "subscription": json.RawMessage(subscription)})
}

// stall is a node under the push attack: users whose Web Push endpoints answer 503 (on one
// fake service, down) and users whose endpoints drip their bodies (each Drip its own
// origin), all with a push under way, and a healthy fake service for the victims.
type stall struct {
	n      *node
	sender string // alice's token
	down   *pushtest.WebPush
	drip   *pushtest.Drip
	held   int // dripping requests startStall waited to be held
	victim *pushtest.WebPush
}

// startStall starts the node and the attack: failing users on the down service, and
// dripping users spread over the origins servers of a Drip (201 answers, as if accepted).
// It returns once the dripping users' requests are held and the down service has failed
// enough requests in a row to open a breaker.
func startStall(tb testing.TB, cfg server.Config, failing, dripping, origins int) *stall {
	tb.Helper()
	s := &stall{n: &node{parleytest.StartWith(tb, cfg)}, down: pushtest.NewWebPush(tb), victim: pushtest.NewWebPush(tb),
		drip: pushtest.NewDrip(tb, http.StatusCreated, origins), held: min(dripping, 128)}
	s.down.SetDown(true)
	s.sender = s.n.User(tb, "alice")
	var members []string
	for i := range failing + dripping {
		id := fmt.Sprintf("attacker%03d", i)
		tok := s.n.User(tb, id)
		sub := ""
		if i < failing {
			sub = s.down.NewSubscription()
		} else {
			sub = s.drip.Subscription()
		}
		s.n.registerWebPush(tb, tok, sub)
		members = append(members, id)
	}
	g := s.n.ok(tb, "POST", "/v1/conversations", s.sender, map[string]any{"type": "group", "name": "attack", "members": members})
	s.n.ok(tb, "POST", "/v1/messages", s.sender, textMessage(g["conv_id"].(string), "attack"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)
	defer cancel()
	// Every dripping user's request held, or as many as the pusher has workers (128): past
	// that, before the fix, nothing else was pushed.
	if err := s.drip.WaitHeld(ctx, s.held); err != nil {
		tb.Fatal(err)
	}
	if err := s.down.WaitRequests(ctx, min(failing, 5)); err != nil { // enough failures in a row to open a breaker
		tb.Fatal(err)
	}
	return s
}

// addVictim makes user id with a device on the healthy service and a direct conversation
// with alice, and returns the conversation.
func (s *stall) addVictim(tb testing.TB, id string) string {
	tb.Helper()
	tok := s.n.User(tb, id)
	s.n.registerWebPush(tb, tok, s.victim.NewSubscription())
	return s.n.direct(tb, tok, "alice")["conv_id"].(string) // the victim's: alice's creations are rate limited
}

// stillHeld fails tb unless the dripping requests startStall waited for are still held:
// none was cut off, so what happened since happened while the attack held them.
func (s *stall) stillHeld(tb testing.TB) {
	tb.Helper()
	if held, cut, _ := s.drip.Counts(); cut != 0 || held < s.held {
		tb.Fatalf("%d dripping requests held (want at least %d), %d cut off: the attack was not held throughout", held, s.held, cut)
	}
}

func stallConfig(tb testing.TB) server.Config {
	cfg := server.DefaultConfig(tb.TempDir())
	cfg.AdminSecret = "test-admin-secret-0123456789abcdef"
	withLoopbackWebPush(&cfg)
	return cfg
}

// TestAttackPushStalled: ten users whose Web Push endpoints answer 503 and ten whose
// endpoints answer and then drip their bodies (each on an origin of its own) do not keep
// another user's Web Push from being delivered while the drips are still held. Before the
// fix the 503s opened the one Web Push breaker, parking every user's push.
func TestAttackPushStalled(t *testing.T) {
	s := startStall(t, stallConfig(t), 10, 10, 10)
	conv := s.addVictim(t, "victim")
	s.n.send(t, s.sender, conv, "hello-victim")
	waitCount(t, "the victim's push", s.victim.WaitCount, 1)
	s.stillHeld(t)
	if m := s.victim.Messages()[0]; m.Data["conv_id"] != conv {
		t.Fatalf("victim got %+v", m.Data)
	}
}

// TestAttackPushDrip130: 130 endpoints that answer and then drip their bodies, each an
// origin of its own, more than the pusher's 128 workers, do not keep a victim's push from
// being delivered while they are all still held. Before the fix they held every worker
// (no deadline covered the body) and the victim was never pushed.
func TestAttackPushDrip130(t *testing.T) {
	s := startStall(t, stallConfig(t), 0, 130, 130)
	conv := s.addVictim(t, "victim")
	s.n.send(t, s.sender, conv, "hello-victim")
	waitCount(t, "the victim's push", s.victim.WaitCount, 1)
	s.stillHeld(t)
}

// TestAttackPushMetricLabels: an endpoint answering a new error body to every push adds no
// series to /metrics: the failure's reason label is its status, from a fixed set. Before the
// fix every distinct body made a parley_push_failed_total series.
func TestAttackPushMetricLabels(t *testing.T) {
	parleytest.OneNode(t, "reads the node's metrics")
	var seq atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "reason_%d", seq.Add(1))
	}))
	t.Cleanup(bad.Close)
	n := start(t, withLoopbackWebPush)
	alice := n.user(t, "alice")
	const users = 12
	for i := range users {
		id := fmt.Sprintf("u%02d", i)
		n.registerWebPush(t, n.user(t, id), pushtest.NewSubscriptionTo(bad.URL+"/push/"+id))
		n.send(t, alice, n.direct(t, alice, id)["conv_id"].(string), "m-"+id)
	}
	var series map[string]float64
	eventually(t, "every push rejected", func() bool {
		series = seriesOf(t, n, "parley_push_failed_total")
		sum := 0.0
		for _, v := range series {
			sum += v
		}
		return sum == users
	})
	if want := `parley_push_failed_total{provider="webpush",reason="400"}`; len(series) != 1 || series[want] != users {
		t.Fatalf("parley_push_failed_total has %d series, want only %s: %v", len(series), want, series)
	}
}

// seriesOf returns the series of metric name on the node's /metrics, by name and labels.
func seriesOf(t testing.TB, n *node, name string) map[string]float64 {
	t.Helper()
	r := n.call(t, "GET", "/metrics", "", nil)
	out := make(map[string]float64)
	sc := bufio.NewScanner(bytes.NewReader(r.raw))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name+"{") {
			k, v, _ := strings.Cut(sc.Text(), " ")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %q", sc.Text())
			}
			out[k] = f
		}
	}
	return out
}

// BenchmarkPushVictimUnderAttack is the figure: a victim's Web Push, with 10 users'
// endpoints answering 503 and 10 dripping their bodies. Each iteration is a new victim
// (a device is pushed at most once a second: CollapseWindow) sent one message; it reports
// the mean and the worst time from the send to the healthy service's acceptance, and
// drips-cut, how many dripping requests ended before the run did (0: the attack held
// throughout).
func BenchmarkPushVictimUnderAttack(b *testing.B) {
	s := startStall(b, stallConfig(b), 10, 10, 10)
	var total, worst time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		conv := s.addVictim(b, fmt.Sprintf("victim%06d", i))
		b.StartTimer()
		start := time.Now()
		s.n.send(b, s.sender, conv, fmt.Sprint("hello-", i))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.victim.WaitCount(ctx, i+1); err != nil {
			b.Fatalf("victim %d: %v", i, err)
		}
		cancel()
		el := time.Since(start)
		total, worst = total+el, max(worst, el)
	}
	b.StopTimer()
	_, cut, _ := s.drip.Counts()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "victim-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "victim-max-ms")
	b.ReportMetric(float64(cut), "drips-cut")
}
