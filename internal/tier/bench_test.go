package tier_test

// The cold tier's benchmarks: the figures docs/design.md, "History tiers", asks of it.
// Each builds a million messages on the default (durable) Pebble engine, which takes tens
// of seconds, once per benchmark process: the runs that -count asks for share it, and a
// run that changes it (a tiering pass) works on a copy. Run them one at a time, e.g.
//
//	go test ./internal/tier/ -run '^$' -bench 'TierPass' -benchtime 1x -count 3
//
// Nothing here runs without -bench.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/blobopen"
	"github.com/parleychat/parley/internal/blob/disk"
	"github.com/parleychat/parley/internal/blob/s3"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/store/pebble"
	"github.com/parleychat/parley/internal/tier"
	"github.com/parleychat/parley/protocol"
)

const (
	benchConvs    = 1000
	benchPerConv  = 1000 // messages of each conversation, one a minute
	benchOld      = 900  // of which this many are older than the hot window
	benchMessages = benchConvs * benchPerConv
	benchJumpMsgs = 1_000_000 // the one conversation of the jump benchmark
)

// benchBase is the created_at of each conversation's first message.
var benchBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// benchNow is the sealer's clock: the hot window ends at message benchOld of each
// conversation of the many-conversation fixture.
func benchNow() time.Time {
	return time.UnixMilli(benchBase + benchOld*60_000).Add(tier.DefaultHotWindow)
}

// words make the messages' text: realistic prose compresses as chat does, unlike one
// sentence repeated.
var words = strings.Fields(`the a to and of I you it is that in for on me we be this with
have just so not are was what my but do at can if all your get no like it's going will
know up out one about time think good how now yes see there got back they then when
really need today tomorrow here want meeting call later sure thanks okay lunch home work
office project deadline review please send file did well let's maybe great sounds plan
week weekend morning night tonight after before still could would should been from more
some our them again right make sorry love happy soon yeah haha lol wait check link photo
train late early dinner coffee done fixed bug release deploy server test number email`)

// text returns about n bytes of content, as the client sends it (JSON).
func text(rng *rand.Rand, n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"text":"`)
	for sb.Len() < n {
		if sb.Len() > 9 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rng.IntN(len(words))])
	}
	sb.WriteString(`"}`)
	return []byte(sb.String())
}

// fixture is a built store, closed, in dir; runs open copies of it.
type fixture struct {
	once   sync.Once
	dir    string
	convs  []benchConv
	setupS float64
	err    error
}

type benchConv struct{ id, a, b string }

var (
	manyFixture fixture // benchConvs conversations of benchPerConv messages
	jumpFixture fixture // one conversation of benchJumpMsgs
	sealedMany  fixture // a copy of manyFixture after one pass, for the reads
	sealedJump  fixture
	tmpRoot     string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

func mkdir(prefix string) (string, error) {
	if tmpRoot == "" {
		d, err := os.MkdirTemp("", "parley-tierbench-")
		if err != nil {
			return "", err
		}
		tmpRoot = d
	}
	return os.MkdirTemp(tmpRoot, prefix)
}

func newService(st store.Store, now func() time.Time) *chat.Service {
	return chat.New(chat.Options{Store: st, Hub: hub.New(), Signer: auth.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
		Config: chat.DefaultConfig(), Now: now})
}

// concurrently calls fn(0..n-1) from par goroutines and returns the first error.
func concurrently(par, n int, fn func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, par)
	for range par {
		go func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range par {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// build creates convs direct conversations of perConv messages each with AppendMessage,
// from many goroutines at once so that group commit batches hundreds of appends.
func (f *fixture) build(convs, perConv int) {
	start := time.Now()
	ctx := context.Background()
	if f.dir, f.err = mkdir("fixture-"); f.err != nil {
		return
	}
	st, err := pebble.Open(ctx, pebble.Options{Dir: f.dir})
	if err != nil {
		f.err = err
		return
	}
	defer func() {
		if err := st.Close(); f.err == nil {
			f.err = err
		}
	}()
	// The users and conversations are older than the messages, whose created_at the store
	// keeps from going back past the conversation's.
	svc := newService(st, func() time.Time { return time.UnixMilli(benchBase - 3600_000) })
	f.convs = make([]benchConv, convs)
	if f.err = concurrently(64, convs, func(i int) error {
		c := benchConv{a: "a" + strconv.Itoa(i), b: "b" + strconv.Itoa(i)}
		for _, u := range []string{c.a, c.b} {
			if _, _, err := svc.CreateUser(ctx, u, ""); err != nil {
				return err
			}
		}
		r, err := svc.CreateConversation(ctx, chat.Identity{UserID: c.a, DeviceID: "d"},
			protocol.CreateConversationRequest{Type: protocol.TypeDirect, PeerID: c.b})
		c.id = r.ConvID
		f.convs[i] = c
		return err
	}); f.err != nil {
		return
	}
	// One message of perConv at a time across the conversations, so that seqs and
	// created_at agree in every conversation; step is the gap between two of them.
	step := int64(60_000)
	if convs == 1 {
		step = 1000
	}
	f.err = concurrently(512, convs*perConv, func(i int) error {
		c, k := f.convs[i%convs], int64(i/convs)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		from := c.a
		if rng.IntN(2) == 0 {
			from = c.b
		}
		_, err := st.AppendMessage(ctx, store.Message{
			ConvID: c.id, MsgID: fmt.Sprintf("m_%d", i), ClientMsgID: fmt.Sprintf("c%d", i), SenderID: from,
			ContentType: 1, Content: text(rng, 180+rng.IntN(40)), CreatedAt: benchBase + k*step,
		})
		return err
	})
	f.setupS = time.Since(start).Seconds()
}

// run is an open copy of a fixture.
type run struct {
	dir   string
	st    *pebble.Store
	blobs blob.Store
}

// open copies f (hard links for the sstables, which Pebble never changes) and opens it.
func (f *fixture) open(b *testing.B) *run {
	b.Helper()
	dir, err := mkdir("run-")
	if err != nil {
		b.Fatal(err)
	}
	if err := copyTree(f.dir, dir); err != nil {
		b.Fatal(err)
	}
	r := &run{dir: dir}
	if r.st, err = pebble.Open(context.Background(), pebble.Options{Dir: dir}); err != nil {
		b.Fatal(err)
	}
	if r.blobs, err = disk.Open(filepath.Join(dir, "blobs")); err != nil {
		b.Fatal(err)
	}
	return r
}

func (r *run) close() {
	r.st.Close()
	r.blobs.Close()
	os.RemoveAll(r.dir)
}

func copyTree(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if strings.HasSuffix(p, ".sst") || strings.Contains(rel, "blobs") {
			return os.Link(p, to)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// dirBytes is the size of the files in dir, or of its sstables only when sst is set: the
// rest are mostly write-ahead logs, which Pebble recycles at the size of the largest.
func dirBytes(dir string, sst ...bool) int64 {
	n := int64(0)
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && (len(sst) == 0 || strings.HasSuffix(p, ".sst")) {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (f *fixture) need(b *testing.B, convs, perConv int) {
	b.Helper()
	f.once.Do(func() { f.build(convs, perConv) })
	if f.err != nil {
		b.Fatal(f.err)
	}
}

// BenchmarkTierPass measures one Sealer.Pass over the million messages of a thousand
// conversations, 90% of them past the hot window (figures a and c): messages sealed per
// second and CPU per message, the segments' compression ratio, and the Pebble directory's
// size after the pass (the store closed and reopened, as after a restart) against its
// all-hot size. Use -benchtime 1x: each iteration seals a fresh copy.
func BenchmarkTierPass(b *testing.B) {
	manyFixture.need(b, benchConvs, benchPerConv)
	pebbleDir := func(r *run) string { return filepath.Join(r.dir, pebble.DirName) }
	var rate, cpu, ratio, hot, hotSST, allHot, after float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// The label marks the pass's samples in a -cpuprofile (pprof -tagfocus
		// phase=pass), the store's writer and compactions included: they start in open.
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("phase", "pass")))
		r := manyFixture.open(b)
		before, beforeSST := dirBytes(pebbleDir(r)), dirBytes(pebbleDir(r), true)
		s := tier.NewSealer(r.st, r.blobs, tier.Config{HotWindow: tier.DefaultHotWindow}, benchNow, nil, nil)
		c0, t0 := cpuTime(), time.Now()
		b.StartTimer()
		ps, err := s.Pass(context.Background())
		b.StopTimer()
		d, c := time.Since(t0), cpuTime()-c0
		if err != nil {
			b.Fatal(err)
		}
		if want := benchConvs * (benchOld - 0); ps.Messages != want {
			b.Fatalf("pass sealed %d messages, want %d", ps.Messages, want)
		}
		r.st.Close()
		var err2 error
		if r.st, err2 = pebble.Open(context.Background(), pebble.Options{Dir: r.dir}); err2 != nil {
			b.Fatal(err2)
		}
		size, sizeSST := dirBytes(pebbleDir(r)), dirBytes(pebbleDir(r), true)
		if os.Getenv("TIERBENCH_FILES") != "" {
			filepath.Walk(pebbleDir(r), func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() && fi.Size() > 1<<20 {
					b.Logf("%s %d", filepath.Base(p), fi.Size())
				}
				return nil
			})
		}
		rate = float64(ps.Messages) / d.Seconds()
		cpu = float64(c.Microseconds()) / float64(ps.Messages)
		ratio = float64(ps.RawBytes) / float64(ps.Bytes)
		hot = float64(size) / float64(before)
		hotSST = float64(sizeSST) / float64(beforeSST)
		allHot, after = float64(before)/1e6, float64(size)/1e6
		r.close()
		pprof.SetGoroutineLabels(context.Background())
	}
	b.ReportMetric(rate, "sealed/s")
	b.ReportMetric(cpu, "cpu-µs/msg")
	b.ReportMetric(ratio, "raw/stored")
	b.ReportMetric(hot, "hot/all-hot")
	b.ReportMetric(hotSST, "sst-hot/all-hot")
	b.ReportMetric(allHot, "all-hot-MB")
	b.ReportMetric(after, "hot-MB")
	b.ReportMetric(manyFixture.setupS, "setup-s")
}

// sealed returns f sealed by one pass at now, in a directory of its own, built once.
func (f *fixture) sealed(b *testing.B, of *fixture, convs, perConv int, now func() time.Time) {
	b.Helper()
	of.need(b, convs, perConv)
	f.once.Do(func() {
		r := of.open(b)
		defer r.st.Close()
		defer r.blobs.Close()
		s := tier.NewSealer(r.st, r.blobs, tier.Config{HotWindow: tier.DefaultHotWindow}, now, nil, nil)
		if _, f.err = s.Pass(context.Background()); f.err == nil {
			f.dir, f.convs = r.dir, of.convs
		}
	})
	if f.err != nil {
		b.Fatal(f.err)
	}
}

// latencyReads is the fewest reads a latency benchmark times, whatever b.N is, so that
// its p99 means something under -benchtime 1x (which the pass benchmarks need).
const latencyReads = 2000

// percentiles reports the p50 and p99 of lat in milliseconds.
func percentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// BenchmarkColdPage measures a 50-message history page read from the cold tier (figure
// b): Warm reads segments the cache holds, Cold reads each through a fresh tier.Store
// (an empty cache: one blob read and one decode a page). S3 copies the segments to
// $PARLEY_TEST_S3_URL and reads them cold from there; it is skipped without it.
func BenchmarkColdPage(b *testing.B) {
	sealedMany.sealed(b, &manyFixture, benchConvs, benchPerConv, benchNow)
	b.ResetTimer()
	page := func(b *testing.B, ts *tier.Store, rng *rand.Rand, convs []benchConv) time.Duration {
		c := convs[rng.IntN(len(convs))]
		before := int64(51 + rng.IntN(benchOld-50))
		t0 := time.Now()
		var ms []store.Message
		err := ts.View(context.Background(), func(tx store.ReadTx) (err error) {
			ms, err = tx.Messages(context.Background(), c.id, store.MessageRange{BeforeSeq: before, Limit: 50})
			return err
		})
		d := time.Since(t0)
		if err != nil || len(ms) != 50 || ms[49].Seq != before-1 {
			b.Fatalf("page below %d of %s: %d messages, %v", before, c.id, len(ms), err)
		}
		return d
	}
	read := func(b *testing.B, blobs blob.Store, fresh bool) {
		r := sealedMany.open(b)
		defer r.close()
		if blobs == nil {
			blobs = r.blobs
		}
		convs := sealedMany.convs
		ts := tier.Wrap(r.st, blobs, tier.Config{}, nil, nil)
		rng := rand.New(rand.NewPCG(1, 2))
		if !fresh { // the cache holds these conversations' segments
			convs = convs[:50]
			for range 200 {
				page(b, ts, rng, convs)
			}
		}
		lat := make([]time.Duration, 0, max(b.N, latencyReads))
		b.ResetTimer()
		for range max(b.N, latencyReads) {
			if fresh {
				ts = tier.Wrap(r.st, blobs, tier.Config{}, nil, nil)
			}
			lat = append(lat, page(b, ts, rng, convs))
		}
		b.StopTimer()
		percentiles(b, lat)
	}
	b.Run("Warm", func(b *testing.B) { read(b, nil, false) })
	b.Run("Cold", func(b *testing.B) { read(b, nil, true) })
	b.Run("S3", func(b *testing.B) {
		raw := os.Getenv("PARLEY_TEST_S3_URL")
		if raw == "" {
			b.Skip("PARLEY_TEST_S3_URL is unset")
		}
		opts, err := blobopen.ParseS3(raw)
		if err != nil {
			b.Fatal(err)
		}
		opts.Prefix += fmt.Sprintf("tierbench-%d/", time.Now().UnixNano())
		s, err := s3.Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		var keys []string
		defer func() {
			for _, k := range keys {
				s.Delete(context.Background(), k)
			}
			s.Close()
		}()
		root := filepath.Join(sealedMany.dir, "blobs")
		if err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			rel, _ := filepath.Rel(root, p)
			if err != nil || fi.IsDir() || !strings.HasPrefix(filepath.ToSlash(rel), "s/") {
				return err // the segments' keys start s/; the rest is the store's own
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			keys = append(keys, filepath.ToSlash(rel))
			return s.Put(context.Background(), filepath.ToSlash(rel), f, fi.Size())
		}); err != nil {
			b.Fatal(err)
		}
		read(b, s, true)
	})
}

// BenchmarkJumpToDateCold measures History with AroundTS (a jump to a date and its page
// of 50) in a conversation of a million messages, one a second, 90% of them cold (figure
// d), through chat.Service on the tier.Store with its default cache, at random times.
func BenchmarkJumpToDateCold(b *testing.B) {
	hot := int64(benchJumpMsgs / 10 * 1000)
	last := benchBase + (benchJumpMsgs-1)*1000
	now := func() time.Time { return time.UnixMilli(last - hot).Add(tier.DefaultHotWindow) }
	sealedJump.sealed(b, &jumpFixture, 1, benchJumpMsgs, now)
	r := sealedJump.open(b)
	defer r.close()
	svc := newService(tier.Wrap(r.st, r.blobs, tier.Config{}, nil, nil), now)
	c := sealedJump.convs[0]
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, max(b.N, latencyReads))
	b.ResetTimer()
	for range max(b.N, latencyReads) {
		ts := benchBase + rng.Int64N(last-benchBase+1)
		t0 := time.Now()
		p, err := svc.History(context.Background(), chat.Identity{UserID: c.b, DeviceID: "d"}, c.id, chat.HistoryQuery{AroundTS: ts})
		lat = append(lat, time.Since(t0))
		if err != nil || p.AnchorSeq == 0 || len(p.Messages) != protocol.DefaultPageLimit {
			b.Fatalf("jump to %d: anchor %d, %d messages, %v", ts, p.AnchorSeq, len(p.Messages), err)
		}
	}
	b.StopTimer()
	percentiles(b, lat)
	b.ReportMetric(jumpFixture.setupS, "setup-s")
}

// BenchmarkSendDuringPass measures the direct-send rate of 64 senders through
// chat.Service into the fixture's conversations for a few seconds alone, then while a
// tiering pass runs (figure e), and reports both and their ratio, with the pass unpaced
// and paced (Config.Rate). -benchtime 1x.
func BenchmarkSendDuringPass(b *testing.B) {
	manyFixture.need(b, benchConvs, benchPerConv)
	for _, rate := range []int{0, 20_000} {
		b.Run(fmt.Sprintf("Rate=%d", rate), func(b *testing.B) { sendDuringPass(b, rate) })
	}
}

func sendDuringPass(b *testing.B, rate int) {
	const window = 8 * time.Second
	var alone, during, passRate float64
	b.ResetTimer()
	for range b.N {
		// As in BenchmarkTierPass: -tagfocus phase=send picks this run's store (its writer
		// and compactions), phase=alone and phase=during the senders of each half.
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("phase", "send")))
		r := manyFixture.open(b)
		svc := newService(tier.Wrap(r.st, r.blobs, tier.Config{}, nil, nil), nil)
		var n atomic.Int64
		send := func(stop <-chan struct{}) (float64, error) {
			t0, n0 := time.Now(), n.Load()
			err := concurrently(64, 64, func(int) error {
				rng := rand.New(rand.NewPCG(uint64(n.Add(1)), 3))
				for {
					select {
					case <-stop:
						return nil
					default:
					}
					i := n.Add(1)
					c := manyFixture.convs[rng.IntN(len(manyFixture.convs))]
					if _, err := svc.Send(context.Background(), chat.Identity{UserID: c.a, DeviceID: "d"}, protocol.SendRequest{
						ConvID: c.id, ClientMsgID: "s" + strconv.FormatInt(i, 10), ContentType: 1, Content: text(rng, 200),
					}); err != nil {
						return err
					}
				}
			})
			return float64(n.Load()-n0) / time.Since(t0).Seconds(), err
		}
		timer := func(d time.Duration) <-chan struct{} {
			c := make(chan struct{})
			time.AfterFunc(d, func() { close(c) })
			return c
		}
		var err error
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("phase", "alone")))
		if alone, err = send(timer(window)); err != nil {
			b.Fatal(err)
		}
		s := tier.NewSealer(r.st, r.blobs, tier.Config{HotWindow: tier.DefaultHotWindow, Rate: rate}, benchNow, nil, nil)
		stop := make(chan struct{})
		var ps tier.PassStats
		var passErr error
		var passD time.Duration
		go func() {
			t0 := time.Now()
			ps, passErr = s.Pass(context.Background())
			passD = time.Since(t0)
			close(stop)
		}()
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("phase", "during")))
		during, err = send(stop) // as long as the pass runs
		if err != nil || passErr != nil {
			b.Fatal(err, passErr)
		}
		passRate = float64(ps.Messages) / passD.Seconds()
		r.close()
		pprof.SetGoroutineLabels(context.Background())
	}
	b.ReportMetric(alone, "alone-msgs/s")
	b.ReportMetric(during, "during-msgs/s")
	b.ReportMetric(during/alone, "ratio")
	b.ReportMetric(passRate, "sealed/s")
}
