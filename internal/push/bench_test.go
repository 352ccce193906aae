package push_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/fcm"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/protocol"
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
func (benchFacts) Name(context.Context, string) (string, error) {
	return "Sender", nil
}

// BenchmarkOfflineFanout is issue 11's first figure: 10,000 offline devices, each
// registered with the fake FCM (HTTP/2 over TLS, OAuth token checked), get one message
// each (one message to each of 20 groups of 500, as a node commits them: an event in every
// member's log). It reports pushes/s from the first commit to the last acceptance by the
// fake, and the lag (commit to acceptance) percentiles. The pusher, the provider's client
// and the fake share the two cores.
func BenchmarkOfflineFanout(b *testing.B) {
	const (
		groups    = 20
		groupSize = 500 // the default largest write-fanout group
		devices   = groups * groupSize
	)
	for range b.N {
		f := pushtest.NewFCM(b)
		prov, err := fcm.New(fcm.Options{CredentialsFile: f.CredentialsFile(), Endpoint: f.URL(), HTTPClient: f.Client()})
		if err != nil {
			b.Fatal(err)
		}
		st, err := pebble.Open(context.Background(), pebble.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		err = st.Update(ctx, func(tx store.Tx) error {
			if err := tx.CreateUser(ctx, store.User{ID: "sender", Name: "Sender", TokenGen: 1}); err != nil {
				return err
			}
			for g := range groups {
				c := fmt.Sprint("g", g)
				if err := tx.CreateConversation(ctx, store.Conversation{ID: c, Type: protocol.TypeGroup, MembersCount: groupSize + 1}); err != nil {
					return err
				}
				if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: "sender", Ordinal: 1}); err != nil {
					return err
				}
				for j := range groupSize {
					u := fmt.Sprint("u", g*groupSize+j)
					if err := tx.CreateUser(ctx, store.User{ID: u, Name: u, TokenGen: 1}); err != nil {
						return err
					}
					if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: u, Ordinal: int64(j + 2)}); err != nil {
						return err
					}
					if err := tx.PutPushTarget(ctx, store.PushTarget{UserID: u, DeviceID: "phone", Provider: push.FCM, Token: "tok-" + u, RegisteredAt: 1}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		obs := &lagObs{}
		p := push.New(push.Options{Store: st, Facts: benchFacts{}, Providers: map[string]push.Provider{push.FCM: prov}, Obs: obs})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); p.Run(rctx) }()

		b.ResetTimer()
		start := time.Now()
		sent := make(chan struct{})
		go func() { // one message to each group of 500: one event in each member's log
			defer close(sent)
			for g := range groups {
				res, err := st.AppendMessage(ctx, store.Message{ConvID: fmt.Sprint("g", g), SenderID: "sender", ClientMsgID: fmt.Sprint("m", g),
					MsgID: fmt.Sprint("id", g), ContentType: 1, Content: []byte(`{"text":"hi"}`), CreatedAt: time.Now().UnixMilli()})
				if err != nil {
					b.Error(err)
					return
				}
				for _, d := range res.Events {
					p.Notify(d.UserID, d.Cursor)
				}
			}
		}()
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := f.WaitCount(wctx, devices); err != nil {
			b.Fatalf("%d of %d pushed: %v", f.Count(), devices, err)
		}
		el := time.Since(start)
		wcancel()
		b.StopTimer()
		<-sent
		b.ReportMetric(float64(devices)/el.Seconds(), "pushes/s")
		obs.mu.Lock()
		lags := obs.lags
		obs.mu.Unlock()
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		if len(lags) > 0 {
			b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "lag-p99-ms")
			b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "lag-p50-ms")
		}
		cancel()
		<-done
		st.Close()
	}
}
