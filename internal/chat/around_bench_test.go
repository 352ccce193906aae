package chat_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/protocol"
)

// jumpFixture is a conversation of a million messages, one a second, on the default
// (durable) Pebble store. Building it takes most of a minute, so the runs of one benchmark
// (the testing package calls it with N=1 first) share it.
var jumpFixture struct {
	once   sync.Once
	svc    *chat.Service
	st     *pebble.Store
	conv   string
	first  int64 // created_at of seq 1
	last   int64 // created_at of the newest
	dir    string
	setupS float64
	err    error
}

const jumpMessages = 1_000_000

// TestMain removes the benchmark's fixture, which outlives any one benchmark run.
func TestMain(m *testing.M) {
	code := m.Run()
	if f := &jumpFixture; f.dir != "" {
		if f.st != nil {
			f.st.Close()
		}
		os.RemoveAll(f.dir)
	}
	os.Exit(code)
}

// buildJumpFixture appends jumpMessages messages with AppendMessage from many goroutines
// at once, so that group commit puts hundreds in each commit: the store's own bulk path.
func buildJumpFixture() {
	f := &jumpFixture
	start := time.Now()
	ctx := context.Background()
	if f.dir, f.err = os.MkdirTemp("", "parley-jump-"); f.err != nil {
		return
	}
	st, err := pebble.Open(ctx, pebble.Options{Dir: f.dir})
	if err != nil {
		f.err = err
		return
	}
	f.st = st
	f.svc = chat.New(chat.Options{Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")), Config: chat.DefaultConfig()})
	for _, u := range []string{"alice", "bob"} {
		if _, _, f.err = f.svc.CreateUser(ctx, u, ""); f.err != nil {
			return
		}
	}
	c, err := f.svc.CreateConversation(ctx, me("alice"), protocol.CreateConversationRequest{Type: "direct", PeerID: "bob"})
	if err != nil {
		f.err = err
		return
	}
	f.conv, f.first = c.ConvID, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	var next atomic.Int64 // the next message's index; its created_at is first + index seconds
	errs := make(chan error, 512)
	var wg sync.WaitGroup
	for range 512 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < jumpMessages; i = next.Add(1) - 1 {
				_, err := st.AppendMessage(ctx, store.Message{
					ConvID: f.conv, MsgID: fmt.Sprintf("m_%d", i), ClientMsgID: fmt.Sprintf("c%d", i), SenderID: "alice",
					ContentType: 1, Content: []byte(`{"text":"a message of a few words, as most are"}`), CreatedAt: f.first + i*1000,
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if f.err = <-errs; f.err != nil {
		return
	}
	// Appends from many goroutines commit in any order; the store keeps created_at from
	// going back, so the newest message is at least this late.
	f.last = f.first + (jumpMessages-1)*1000
	f.setupS = time.Since(start).Seconds()
}

// BenchmarkJumpToDate1M measures History with AroundTS, a jump to a random second of a
// million-message conversation: MessageAt's bisection (about 20 point reads) and the two
// range reads of the page (50 messages). It reports the latency percentiles: the figure a
// user waits for is p99, not the mean.
func BenchmarkJumpToDate1M(b *testing.B) {
	jumpFixture.once.Do(buildJumpFixture)
	f := &jumpFixture
	if f.err != nil {
		b.Fatal(f.err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		ts := f.first + rng.Int64N(f.last-f.first+1)
		t0 := time.Now()
		p, err := f.svc.History(ctx, me("bob"), f.conv, chat.HistoryQuery{AroundTS: ts})
		lat = append(lat, time.Since(t0))
		if err != nil || p.AnchorSeq == 0 || len(p.Messages) != protocol.DefaultPageLimit {
			b.Fatalf("jump to %d: anchor %d, %d messages, %v", ts, p.AnchorSeq, len(p.Messages), err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(f.setupS, "setup-s")
}
