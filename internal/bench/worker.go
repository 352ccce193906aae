package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parleychat/parley/client"
)

// workload is one scenario as a worker runs it.
type workload interface {
	// prepare connects the devices; it runs before the start signal.
	prepare(ctx context.Context) error
	// run generates the load from the start until the duration ends, the quotas are met or
	// stop is closed. Operations under way when it ends are finished, not abandoned.
	run(ctx context.Context, at time.Time, stop <-chan struct{})
	// drain waits for receivers to reach targets (highest acked seq per conversation) or
	// holds connections for hold, then closes everything.
	drain(ctx context.Context, targets map[string]int64, hold time.Duration)
}

// worker is the state every workload shares.
type worker struct {
	job    *Job
	hooks  *Hooks
	hc     *http.Client
	rec    *recorder
	v      *Verifier
	ledger *Ledger
	pos    *Positions
	devs   []*device
	times  map[string][]SentAt // the send times of every worker's acked messages, from the drain
	health *nodeHealth         // Failover: which nodes are alive
	kill   *killWatch          // Failover: the catch-up of the killed node's devices

	stopHealthOnce sync.Once
	stopHealth     func() // ends the health watch (Failover)
}

// recvReporter is a workload whose receivers are not devices (w.devs): it reports what they
// received itself.
type recvReporter interface{ recvSummaries() []RecvSummary }

// timesReporter is a workload whose acked messages' send times other workers need.
type timesReporter interface{ sentTimes() map[string][]SentAt }

// Work runs one worker: it reads its job and the coordinator's commands from in and writes
// its answers to out, one JSON object a line (see proto.go). hooks may be nil.
func Work(ctx context.Context, in io.Reader, out io.Writer, hooks *Hooks) error {
	lw := newLineWriter(out)
	msgs := readLines(in)
	err := work(ctx, msgs, lw, hooks)
	if err != nil {
		_ = lw.send(wire{Op: opFail, Error: err.Error()})
	}
	return err
}

func work(ctx context.Context, msgs <-chan wire, lw *lineWriter, hooks *Hooks) error {
	m, ok := <-msgs
	if !ok || m.Op != opJob || m.Job == nil {
		return errors.New("bench worker: expected a job")
	}
	w := newWorker(m.Job, hooks)
	defer w.hc.CloseIdleConnections()
	load, err := w.workload()
	if err != nil {
		return err
	}
	if err := load.prepare(ctx); err != nil {
		return fmt.Errorf("worker %d: prepare: %w", w.job.Worker, err)
	}
	if err := lw.send(wire{Op: opReady}); err != nil {
		return err
	}
	if m, ok = <-msgs; !ok || m.Op != opStart {
		load.drain(ctx, nil, 0)
		return errors.New("bench worker: expected start")
	}
	at := time.Unix(0, m.At)
	w.rec.begin(at)
	if !sleepUntil(ctx, at) {
		load.drain(ctx, nil, 0)
		return ctx.Err()
	}

	// From here on the coordinator may say stop at any time, or vanish.
	stop := make(chan struct{})
	next := make(chan wire, 1)
	go func() {
		stopped := false
		for m := range msgs {
			if m.Op == opKill {
				if w.kill != nil {
					w.killed(m.Node, time.Unix(0, m.At))
				}
				continue
			}
			if m.Op == opStop {
				if !stopped {
					close(stop)
					stopped = true
				}
				continue
			}
			next <- m
		}
		if !stopped {
			close(stop)
		}
		close(next)
	}()
	progDone := make(chan struct{})
	progStopped := make(chan struct{})
	go func() {
		defer close(progStopped)
		w.reportProgress(lw, progDone)
	}()
	defer func() { close(progDone); <-progStopped }()

	if w.health != nil {
		w.stopHealth = w.watchHealth(ctx)
	}
	cpu0, _ := cpuNow()
	load.run(ctx, at, stop)
	cpu1, maxRSS := cpuNow()
	sent := wire{Op: opSent, Acks: w.ledger.Summaries()}
	if t, ok := load.(timesReporter); ok {
		sent.Times = t.sentTimes()
	}
	if err := lw.send(sent); err != nil {
		load.drain(ctx, nil, 0)
		return err
	}
	m, ok = <-next
	if !ok || m.Op != opDrain {
		load.drain(ctx, nil, 0)
		return errors.New("bench worker: expected drain")
	}
	w.times = m.Times
	load.drain(ctx, m.Targets, m.Hold)

	res := &Result{measures: w.rec.export(), CPUSeconds: (cpu1 - cpu0).Seconds(), MaxRSS: maxRSS}
	for _, d := range w.devs {
		if d.spec.Online {
			res.Recvs = append(res.Recvs, d.stream.Summaries()...)
		}
	}
	if r, ok := load.(recvReporter); ok {
		res.Recvs = append(res.Recvs, r.recvSummaries()...)
	}
	res.Violations, res.ByKind, res.Samples = w.v.Summary()
	return lw.send(wire{Op: opResult, Result: res})
}

func newWorker(job *Job, hooks *Hooks) *worker {
	if hooks == nil {
		hooks = &Hooks{}
	}
	v := NewVerifier()
	w := &worker{
		job: job, hooks: hooks, v: v,
		hc:     newHTTPClient(max(64, len(job.Devices)), nil),
		rec:    newRecorder(job.Interval),
		ledger: NewLedger(v), pos: NewPositions(v),
	}
	for i := range job.Devices {
		w.devs = append(w.devs, newDevice(w, job.Devices[i]))
	}
	if job.Failover && len(job.Nodes) > 1 {
		w.health, w.kill = newNodeHealth(w), newKillWatch()
	}
	return w
}

func (w *worker) workload() (workload, error) {
	switch w.job.Scenario {
	case "direct", "group":
		return &messaging{w: w}, nil
	case "read-storm":
		return &readStorm{w: w}, nil
	case "mixed":
		return &mixed{w: w}, nil
	case "idle":
		return newIdle(w), nil
	case "echo":
		return newEchoLoad(w), nil
	case "largegroup", "readstorm", "broadcast", "broadcast-naive":
		if w.job.Room == nil {
			return nil, fmt.Errorf("bench worker: %s job without a room", w.job.Scenario)
		}
		return newRoomLoad(w), nil
	}
	return nil, fmt.Errorf("bench worker: no workload for scenario %q", w.job.Scenario)
}

func (w *worker) reportProgress(lw *lineWriter, done <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p := &progress{
			Ops: w.rec.ops.Load(), Acked: w.rec.acked.Load(), Delivered: w.rec.delivered.Load(),
			Errors: w.rec.errCount.Load(), Violations: w.v.Count(),
		}
		if lw.send(wire{Op: opProgress, Progress: p}) != nil {
			return
		}
	}
}

// loadContext is the context of a load phase: it ends at the deadline (if the job has a
// duration), when stop is closed, or with ctx.
func (w *worker) loadContext(ctx context.Context, at time.Time, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancel(ctx)
	if w.job.Duration > 0 {
		var c2 context.CancelFunc
		lctx, c2 = context.WithDeadline(lctx, at.Add(w.job.Duration))
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	go func() {
		select {
		case <-stop:
			cancel()
		case <-lctx.Done():
		}
	}()
	return lctx, cancel
}

// opContext bounds one operation that must finish even when the load phase has ended.
func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
}

// connectAll opens the WebSockets of the online devices, a few at a time.
func (w *worker) connectAll(ctx context.Context) error {
	return parallel(ctx, len(w.devs), 32, func(i int) error {
		if !w.devs[i].spec.Online {
			return nil
		}
		return w.devs[i].connect(ctx)
	})
}

// closeAll ends every device's session, once no device moves any more.
func (w *worker) closeAll() {
	w.stopHealthOnce.Do(func() {
		if w.stopHealth != nil {
			w.stopHealth()
		}
	})
	w.endKillWatch()
	var wg sync.WaitGroup
	for _, d := range w.devs {
		wg.Go(d.close)
	}
	wg.Wait()
}

// waitCaught waits until every online device holds the targets, or the drain timeout.
// Devices that do not catch up are reported by the coordinator's Check.
func (w *worker) waitCaught(ctx context.Context, targets map[string]int64) {
	if w.job.Resync {
		defer w.resyncWhileBehind(ctx, targets)()
	}
	deadline := time.NewTimer(w.job.DrainTimeout)
	defer deadline.Stop()
	for _, d := range w.devs {
		if !d.spec.Online {
			continue
		}
		for {
			ok, ch := d.stream.Caught(targets)
			if ok {
				break
			}
			select {
			case <-ch:
				continue
			case <-deadline.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

// content builds a text message (protocol.TextContent, so any client shows it) of about size
// bytes that also carries its send time in "t", from which receivers measure
// publish-to-receive latency.
func (w *worker) content(sent time.Time) json.RawMessage {
	return w.appendContent(make([]byte, 0, w.job.Size+40), sent)
}

// appendContent appends the content of a message sent at sent to b.
func (w *worker) appendContent(b []byte, sent time.Time) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, sent.UnixNano(), 10)
	b = append(b, `,"text":"`...)
	for len(b) < w.job.Size-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// sentAt reads the send time embedded by content; ok is false for other contents.
func sentAt(content json.RawMessage) (time.Time, bool) {
	rest, ok := bytes.CutPrefix(content, []byte(`{"t":`))
	if ok {
		i := bytes.IndexAny(rest, ",}")
		if i > 0 {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(rest[:i])), 10, 64); err == nil {
				return time.Unix(0, n), true
			}
		}
	}
	var c struct {
		T int64 `json:"t"`
	}
	if json.Unmarshal(content, &c) == nil && c.T > 0 {
		return time.Unix(0, c.T), true
	}
	return time.Time{}, false
}

// send sends one message from d into conv and records the outcome; its latency is the main
// one unless sends are not the scenario's main operation (asOp false). intended is when the
// schedule wanted it sent: latency counts from there, so a server that falls behind an
// open-loop schedule shows it (no coordinated omission).
func (w *worker) send(ctx context.Context, d *device, conv string, intended time.Time, asOp bool) (client.MessageAck, bool) {
	octx, cancel := opContext(ctx)
	defer cancel()
	ack, err := d.send(octx, conv, w.content(intended))
	if err != nil {
		w.rec.fail(err)
		return ack, false
	}
	w.acked(d, ack, intended, time.Now(), asOp)
	return ack, true
}

// acked records the ack of a send scheduled at intended and answered at now.
func (w *worker) acked(d *device, ack client.MessageAck, intended, now time.Time, asOp bool) {
	if asOp {
		w.rec.op(now, now.Sub(intended))
	}
	w.rec.ack(now)
	w.ledger.Ack(d.spec.User, ack)
}

// device is one device of a user: an SDK client whose events go through a Stream.
type device struct {
	w      *worker
	spec   DeviceSpec
	label  string
	stream *Stream
	sends  sendLog // Failover: the sends under way

	switchMu sync.Mutex // serialises session changes: reconnects, resyncs, moves to another node

	mu   sync.Mutex // guards cl, node, here and leave
	cl   *client.Client
	node int // index into Job.Nodes
	// here ends when the device leaves its node (leave), which stops the sends under way
	// there so that they are made again on the next node.
	here  context.Context
	leave context.CancelFunc
}

func newDevice(w *worker, spec DeviceSpec) *device {
	label := spec.User + "/" + spec.Device
	d := &device{w: w, spec: spec, label: label, stream: NewStream(w.v, spec.User, label), node: spec.Node}
	for conv, base := range spec.Convs {
		d.stream.Watch(conv, base)
		w.ledger.Watch(conv, base)
	}
	d.here, d.leave = context.WithCancel(context.Background())
	d.cl = d.newClient(spec.Node, 0)
	return d
}

func (d *device) newClient(node int, cursor int64) *client.Client {
	a := d.spec.Account
	a.Node = node
	return client.New(client.Options{
		BaseURL: d.w.job.nodeURL(a), Token: d.spec.Token, UserID: d.spec.User,
		HTTPClient: d.w.hc, OnEvent: d.onEvent, OnReset: d.onReset, Cursor: cursor,
		AutoDelivered: d.w.job.Scenario == "mixed", OnRetry: d.onRetry,
	})
}

func (d *device) client() *client.Client {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cl
}

// onRetry counts the SDK's send retries; one that failed without an answer from the
// server may mean that its node is gone, which the health watch then checks at once.
func (d *device) onRetry(err error, wait time.Duration) {
	d.w.rec.retry(err, wait)
	var e *client.Error
	if d.w.health != nil && !errors.As(err, &e) {
		d.w.health.suspect()
	}
}

// connect opens the device's session on its node: from a snapshot the first time, then
// from the cursor the previous session reached.
func (d *device) connect(ctx context.Context) error {
	d.mu.Lock()
	node, cursor := d.node, d.cl.Cursor()
	d.mu.Unlock()
	cl := d.newClient(node, cursor)
	if err := cl.Connect(ctx); err != nil {
		return fmt.Errorf("connect %s: %w", d.label, err)
	}
	d.mu.Lock()
	d.cl = cl
	d.mu.Unlock()
	return nil
}

// live reports whether the device's session is running.
func (d *device) live() bool {
	done := d.client().Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// reconnect drops the session and opens a new one resuming from the cursor reached.
func (d *device) reconnect(ctx context.Context) error {
	d.switchMu.Lock()
	defer d.switchMu.Unlock()
	d.close()
	return d.connect(ctx)
}

// close ends the session; a session that had failed (revoked, replaced) counts as an error.
func (d *device) close() {
	cl := d.client()
	if err := cl.Close(); err != nil {
		d.w.rec.fail(err)
	}
}

func (d *device) onReset(snap client.SyncSnapshot) { d.stream.Reset(snap.Cursor) }

func (d *device) onEvent(ev client.SyncEvent) {
	if h := d.w.hooks.DropEvent; h != nil && h(d.spec.User, d.label, ev) {
		return
	}
	m, ok := d.stream.Event(ev)
	if !ok {
		return
	}
	if m.SenderID == d.spec.User {
		d.w.rec.echo()
		return
	}
	now := time.Now()
	lat := time.Duration(-1)
	if t, ok := sentAt(m.Content); ok {
		lat = max(now.Sub(t), 0)
	}
	d.w.rec.deliver(now, lat)
}

// parallel runs f(0..n-1) with at most conc at once and returns the first error.
func parallel(ctx context.Context, n, conc int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idx := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(conc, n) {
		wg.Go(func() {
			for i := range idx {
				if err := f(i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		select {
		case idx <- i:
		case <-ctx.Done():
			i = n
		}
	}
	close(idx)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		// The parent ended; cancel() above has not run yet.
		first = context.Cause(ctx)
	}
	return first
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// wsBase turns a node's http(s) base URL into its ws(s) one.
func wsBase(httpURL string) string {
	return "ws" + strings.TrimPrefix(strings.TrimRight(httpURL, "/"), "http")
}
