package push_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/fcm"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
)

// lagObs records the lag of every accepted push.
type lagObs struct {
	mu   sync.Mutex
	lags []time.Duration
}

func (o *lagObs) PushSent(_ string, lag time.Duration) {
	o.mu.Lock()
	o.lags = append(o.lags, lag)
	o.mu.Unlock()
}
func (o *lagObs) PushFailed(string, string)       {}
func (o *lagObs) PushRetried(string)              {}
func (o *lagObs) PushGaveUp(string)               {}
func (o *lagObs) PushCollapsed(int)               {}
func (o *lagObs) PushTokenRemoved(string, string) {}

type benchFacts struct{}

func (benchFacts) Badge(context.Context, string) (int, error) { return 1, nil }
func (benchFacts) BadgeIn(context.Context, store.ReadTx, string, map[string]bool) (int, error) {
	return 1, nil
}
func (benchFacts) Name(context.Context, string) (string, error) {
	return "Sender", nil
}

// The fanout of the push figures: one message to each of 20 groups of 500 (the default
// largest write-fanout group) gives 10,000 offline devices one event each, as a node
// commits them.
const (
	fanoutGroups    = 20
	fanoutGroupSize = 500
	fanoutDevices   = fanoutGroups * fanoutGroupSize
)

// fanoutWorld makes a Pebble store with the fanout's users, groups and FCM registrations,
// and runs a pusher on it with prov; stop stops the pusher.
func fanoutWorld(b *testing.B, f *pushtest.FCM, prov push.Provider, obs ...push.Observer) (st store.Store, p *push.Pusher, stop func()) {
	st, err := pebble.Open(context.Background(), pebble.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	err = st.Update(ctx, func(tx store.Tx) error {
		return pushtest.AddFanout(ctx, tx, fanoutGroups, fanoutGroupSize, push.FCM)
	})
	if err != nil {
		b.Fatal(err)
	}
	o := push.Options{Store: st, Facts: benchFacts{}, Providers: map[string]push.Provider{push.FCM: prov}}
	if len(obs) > 0 {
		o.Obs = obs[0]
	}
	p = push.New(o)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	return st, p, func() { cancel(); <-done }
}

// commitFanout appends the fanout's 20 messages and tells the pusher, as chat does.
func commitFanout(b *testing.B, st store.Store, p *push.Pusher) {
	ctx := context.Background()
	for g := range fanoutGroups {
		res, err := st.AppendMessage(ctx, store.Message{ConvID: pushtest.FanoutConv(g), SenderID: "sender", ClientMsgID: fmt.Sprint("m", g),
			MsgID: fmt.Sprint("id", g), ContentType: 1, Content: []byte(`{"text":"hi"}`), CreatedAt: time.Now().UnixMilli()})
		if err != nil {
			b.Error(err)
			return
		}
		for _, d := range res.Events {
			p.Notify(d.UserID, d.Cursor)
		}
	}
}

// BenchmarkOfflineFanout is issue 11's first figure: 10,000 offline devices, each
// registered with the fake FCM (HTTP/2 over TLS, OAuth token checked), get one message
// each, all committed at once. It reports pushes/s from the first commit to the last
// acceptance by the fake, and the lag (commit to acceptance) percentiles. The pusher, the
// provider's client and the fake share the two cores.
func BenchmarkOfflineFanout(b *testing.B) {
	for range b.N {
		f := pushtest.NewFCM(b)
		prov, err := fcm.New(fcm.Options{CredentialsFile: f.CredentialsFile(), Endpoint: f.URL(), HTTPClient: f.Client()})
		if err != nil {
			b.Fatal(err)
		}
		obs := &lagObs{}
		st, p, stop := fanoutWorld(b, f, prov, obs)
		b.ResetTimer()
		start := time.Now()
		go commitFanout(b, st, p)
		wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := f.WaitCount(wctx, fanoutDevices); err != nil {
			b.Fatalf("%d of %d pushed: %v", f.Count(), fanoutDevices, err)
		}
		el := time.Since(start)
		wcancel()
		b.StopTimer()
		b.ReportMetric(float64(fanoutDevices)/el.Seconds(), "pushes/s")
		obs.mu.Lock()
		lags := obs.lags
		obs.mu.Unlock()
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		if len(lags) > 0 {
			b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "lag-p99-ms")
			b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "lag-p50-ms")
		}
		stop()
		st.Close()
	}
}

// BenchmarkProviderOutage is issue 11's second figure: the provider (the fake FCM) is
// down for PARLEY_OUTAGE (default 60 s) while 10,000 offline devices each get a message,
// then comes back. It reports the requests sent and the CPU used while it was down, the
// time from its return until every device was notified, and the notifications repeated
// (the fake counts by push_id: every device must be notified exactly once).
func BenchmarkProviderOutage(b *testing.B) {
	outage := 60 * time.Second
	if v := os.Getenv("PARLEY_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		outage = d
	}
	for range b.N {
		f := pushtest.NewFCM(b)
		prov, err := fcm.New(fcm.Options{CredentialsFile: f.CredentialsFile(), Endpoint: f.URL(), HTTPClient: f.Client()})
		if err != nil {
			b.Fatal(err)
		}
		st, p, stop := fanoutWorld(b, f, prov)
		f.SetDown(true)
		cpu0, t0 := cpuTime(), time.Now()
		commitFanout(b, st, p)
		deadline := time.NewTimer(outage) // the outage's length: measured, not a synchronisation
		<-deadline.C
		downCPU, downFor := cpuTime()-cpu0, time.Since(t0)
		downRequests := f.Requests()
		f.SetDown(false)
		back := time.Now()
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := f.WaitCount(wctx, fanoutDevices); err != nil {
			b.Fatalf("%d of %d notified after the outage: %v", f.Count(), fanoutDevices, err)
		}
		cancel()
		b.ReportMetric(float64(downRequests), "requests-while-down")
		b.ReportMetric(100*downCPU.Seconds()/downFor.Seconds(), "cpu%-while-down")
		b.ReportMetric(time.Since(back).Seconds(), "s-to-recover")
		b.ReportMetric(float64(f.Repeats()), "repeats")
		stop()
		st.Close()
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
