package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/parleychat/parley/client"
)

// messaging is the worker side of direct and group: online devices receive, some of them
// send into their conversation, closed loop or on a fixed schedule.
type messaging struct{ w *worker }

func (l *messaging) prepare(ctx context.Context) error { return l.w.connectAll(ctx) }

func (l *messaging) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := l.w.loadContext(ctx, at, stop)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range l.w.job.Senders {
		d := l.w.devs[s.Device]
		if s.Rate > 0 {
			wg.Go(func() { l.openLoop(lctx, d, s, at) })
		} else {
			wg.Go(func() { l.closedLoop(lctx, d, s) })
		}
	}
	wg.Wait()
}

// closedLoop sends one message at a time, each after the previous one's ack.
func (l *messaging) closedLoop(ctx context.Context, d *device, s SenderSpec) {
	for n := int64(0); (s.Quota == 0 || n < s.Quota) && ctx.Err() == nil; n++ {
		if _, ok := l.w.send(ctx, d, s.Conv, time.Now(), true); !ok {
			sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) // no hot loop on a failing server
		}
	}
}

// maxInFlight bounds the sends an open-loop sender has waiting for acks.
const maxInFlight = 512

// openLoop sends at s.Rate on a fixed schedule whatever the acks do, up to maxInFlight
// outstanding; latency counts from the scheduled time.
func (l *messaging) openLoop(ctx context.Context, d *device, s SenderSpec, at time.Time) {
	interval := time.Duration(float64(time.Second) / s.Rate)
	first := at.Add(time.Duration(rand.Int64N(int64(max(interval, 1))))) // spread senders out
	paced(ctx, interval, first, s.Quota, func(intended time.Time) { l.w.send(ctx, d, s.Conv, intended, true) })
}

// paced calls send every interval from first on, a fixed schedule whatever the calls take,
// each in a goroutine of its own with at most maxInFlight running, quota times (0: until
// ctx ends; < 0: none). It returns once every call has returned.
func paced(ctx context.Context, interval time.Duration, first time.Time, quota int64, send func(intended time.Time)) {
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	next := first
	for n := int64(0); quota == 0 || n < quota; n++ {
		if !sleepUntil(ctx, next) {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		intended := next
		wg.Go(func() {
			defer func() { <-sem }()
			send(intended)
		})
		next = next.Add(interval)
	}
}

func (l *messaging) drain(ctx context.Context, targets map[string]int64, _ time.Duration) {
	if targets != nil {
		l.w.waitCaught(ctx, targets)
	}
	l.w.closeAll()
}

// readStorm is the worker side of read-storm: in rounds, one member posts a message and
// then every member of this worker marks it read at once (Repeat times: the first read
// advances the position, the others repeat it and should cost no storage write).
type readStorm struct{ w *worker }

func (l *readStorm) prepare(ctx context.Context) error { return l.w.connectAll(ctx) }

func (l *readStorm) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := l.w.loadContext(ctx, at, stop)
	defer cancel()
	w := l.w
	if len(w.devs) == 0 {
		return
	}
	sender := w.devs[0]
	for n := int64(0); (w.job.Quota == 0 || n < w.job.Quota) && lctx.Err() == nil; n++ {
		ack, ok := w.send(lctx, sender, w.job.Conv, time.Now(), false)
		if !ok {
			sleepUntil(lctx, time.Now().Add(10*time.Millisecond))
			continue
		}
		var wg sync.WaitGroup
		for _, d := range w.devs {
			wg.Go(func() { l.readAll(ctx, d, ack.Seq) })
		}
		wg.Wait()
		w.rec.count("rounds", 1)
	}
}

func (l *readStorm) readAll(ctx context.Context, d *device, seq int64) {
	w := l.w
	for range w.job.Repeat {
		octx, cancel := opContext(ctx)
		t0 := time.Now()
		got, err := d.client().MarkRead(octx, w.job.Conv, seq)
		cancel()
		now := time.Now()
		if err != nil {
			w.rec.fail(err)
			continue
		}
		w.rec.op(now, now.Sub(t0))
		w.pos.Reply(w.job.Conv, d.spec.User, seq, got)
	}
}

func (l *readStorm) drain(ctx context.Context, targets map[string]int64, _ time.Duration) {
	if targets != nil {
		l.w.waitCaught(ctx, targets)
	}
	l.w.closeAll()
}

// mixed is the worker side of the soak scenario: every user acts at random times (a Poisson
// process) with a blend of actions, while all devices report delivered by themselves.
type mixed struct{ w *worker }

// The action blend, in percent.
const (
	mixSend      = 50
	mixRead      = 20
	mixSync      = 10
	mixHistory   = 10
	mixReconnect = 10
)

func (l *mixed) prepare(ctx context.Context) error { return l.w.connectAll(ctx) }

func (l *mixed) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := l.w.loadContext(ctx, at, stop)
	defer cancel()
	w := l.w
	n := len(w.devs)
	if n == 0 {
		return
	}
	if w.job.Quota < 0 {
		return
	}
	perDevice := w.job.Rate / float64(n)
	var wg sync.WaitGroup
	for i, d := range w.devs {
		q := quota(w.job.Quota, n, i)
		if q < 0 {
			continue
		}
		wg.Go(func() { l.actor(lctx, d, perDevice, q) })
	}
	wg.Wait()
}

func (l *mixed) actor(ctx context.Context, d *device, rate float64, quota int64) {
	convs := d.stream.Convs()
	if len(convs) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	next := time.Now()
	sent := int64(0)
	for quota == 0 || sent < quota {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !sleepUntil(ctx, next) {
			return
		}
		conv := convs[rng.IntN(len(convs))]
		switch p := rng.IntN(100); {
		case p < mixSend:
			l.w.send(ctx, d, conv, time.Now(), true)
			sent++ // attempts: a failing server must not keep a count-limited run going
			l.w.rec.count("sends", 1)
		case p < mixSend+mixRead:
			l.read(ctx, d, conv)
		case p < mixSend+mixRead+mixSync:
			l.sync(ctx, d)
		case p < mixSend+mixRead+mixSync+mixHistory:
			l.history(ctx, d, conv)
		default:
			l.reconnect(ctx, d)
		}
	}
}

// timed runs one action, recording its latency or its error.
func (l *mixed) timed(ctx context.Context, kind string, f func(ctx context.Context) error) {
	octx, cancel := opContext(ctx)
	defer cancel()
	t0 := time.Now()
	err := f(octx)
	now := time.Now()
	l.w.rec.count(kind, 1)
	if err != nil {
		l.w.rec.fail(err)
		return
	}
	l.w.rec.op(now, now.Sub(t0))
}

func (l *mixed) read(ctx context.Context, d *device, conv string) {
	seq := d.stream.Last(conv)
	if seq == 0 {
		return
	}
	l.timed(ctx, "reads", func(ctx context.Context) error {
		got, err := d.client().MarkRead(ctx, conv, seq)
		if err == nil {
			l.w.pos.Reply(conv, d.spec.User, seq, got)
		}
		return err
	})
}

// sync re-reads the device's latest events over HTTP: the page must be gapless and start
// right after the cursor asked for.
func (l *mixed) sync(ctx context.Context, d *device) {
	from := max(d.stream.Cursor()-20, 0)
	l.timed(ctx, "syncs", func(ctx context.Context) error {
		resp, err := d.client().Sync(ctx, from, 50, 0)
		if err != nil {
			return err
		}
		for i, ev := range resp.Events {
			if ev.Cursor != from+int64(i)+1 {
				l.w.v.Reportf(VBadPage, d.label, ev.ConvID, "sync after cursor %d: event %d has cursor %d", from, i, ev.Cursor)
				break
			}
		}
		return nil
	})
}

// history reads the last messages of a conversation: ascending, gapless, from the seq asked.
func (l *mixed) history(ctx context.Context, d *device, conv string) {
	after := max(d.stream.Last(conv)-20, d.spec.Convs[conv])
	l.timed(ctx, "histories", func(ctx context.Context) error {
		page, err := d.client().History(ctx, conv, client.HistoryQuery{AfterSeq: after, Limit: 50})
		if err != nil {
			return err
		}
		seqs := make([]int64, len(page.Messages))
		for i, m := range page.Messages {
			seqs[i] = m.Seq
		}
		for i, s := range seqs {
			if s != after+int64(i)+1 {
				l.w.v.Reportf(VBadPage, d.label, conv, "history after seq %d: %v", after, seqs[:min(len(seqs), 10)])
				break
			}
		}
		return nil
	})
}

func (l *mixed) reconnect(ctx context.Context, d *device) {
	l.timed(ctx, "reconnects", d.reconnect)
}

func (l *mixed) drain(ctx context.Context, targets map[string]int64, _ time.Duration) {
	if targets != nil {
		// A reconnect that failed left its device offline: bring it back, from its cursor,
		// so that it can still receive what it is owed.
		_ = parallel(ctx, len(l.w.devs), 32, func(i int) error {
			if d := l.w.devs[i]; !d.live() {
				if err := d.connect(ctx); err != nil {
					l.w.rec.fail(err)
				}
			}
			return nil
		})
		l.w.waitCaught(ctx, targets)
	}
	l.w.closeAll()
}
