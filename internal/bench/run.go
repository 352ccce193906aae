// Package bench is Parley's load tool: `parley-bench <scenario>` creates users and
// conversations through the admin API, drives a server with the Go SDK from one or several
// processes, checks every delivery as it goes (see Verifier) and reports throughput, HDR
// latency percentiles, errors by code, violations and the server's CPU and memory.
//
// A run has a coordinator (Run) and workers (Work). The coordinator starts a server when
// none is given, sets up the scenario, hands each worker its share as a Job, starts them
// together, merges what they return and writes the report. Workers run in this process
// (Procs 1) or as child processes of the same binary (Procs > 1), speaking JSON lines on
// stdin/stdout, so that a single Go runtime is never the bottleneck.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/redact"
)

// coord is the coordinator of one run.
type coord struct {
	cfg     Config
	opts    Options
	stderr  io.Writer
	base    string
	secret  string
	spawned bool
	runID   string
	hc      *http.Client
	admin   *client.Admin
	v       *Verifier
	sampler *sampler
	env     Env // recorded in every report

	debugAddr string // presence: the pprof address of the server started, "" if none

	nodes   []string  // every node's base URL; base is the first
	spread  *spreader // deals devices to nodes
	cluster *cluster  // the nodes started for --cluster
	killed  *int      // --kill-node-after: the node killed, once it is

	progMu   sync.Mutex // serialises progress output
	progLine bool       // a progress line is on screen (terminal mode)
}

// Run carries out a bench run and returns its report: one run of the scenario, or with
// Config.Runs > 1 several, reported by their medians, and with Config.Baseline the echo
// runs beside them (see runSeries). The error is non-nil when the run could not be carried
// out, and also when it found violations (the report is returned too).
func Run(ctx context.Context, cfg Config, opts Options) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	// Worker processes, the server and the progress line all write to stderr.
	opts.Stderr = &syncWriter{w: opts.Stderr}
	for cfg.Seed == 0 { // one seed for every run of a series: the same spread each time
		cfg.Seed = rand.Uint64()
	}
	if cfg.Runs > 1 || cfg.Baseline {
		return runSeries(ctx, cfg, opts)
	}
	rep, err := runOnce(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	writeTable(opts.Stdout, rep)
	if err := writeFiles(cfg, rep); err != nil {
		return rep, err
	}
	if rep.Violations > 0 {
		return rep, fmt.Errorf("%d violations", rep.Violations)
	}
	return rep, nil
}

// runOnce runs the scenario once, against a server of its own when cfg.Server is empty,
// and returns its report with the verdict (violations) filled in. opts.Stderr must be safe
// for concurrent use.
func runOnce(ctx context.Context, cfg Config, opts Options) (*Report, error) {
	c := &coord{cfg: cfg, opts: opts, stderr: opts.Stderr, runID: newRunID(), v: NewVerifier()}
	c.v.OnViolation = func(v Violation) { c.note("VIOLATION %s", v) }
	c.base, c.secret = cfg.Server, cfg.AdminSecret
	switch {
	case cfg.Scenario == "echo" || cfg.Scenario == "broadcast-naive":
		srv, err := startEcho(ctx, opts.EchoArgv, opts.EchoEnv, c.stderr)
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		c.base, c.spawned = srv.URL, true
		c.note("started echo server %s (pid %d)", srv.URL, srv.cmd.Process.Pid)
	case cfg.Cluster > 0:
		cl, err := startCluster(ctx, cfg, opts, c.serverFlags(), c.stderr)
		if err != nil {
			return nil, err
		}
		defer cl.Stop() // also drops the schema
		c.cluster, c.nodes, c.secret, c.spawned = cl, cl.URLs(), cl.secret, true
		c.note("started %d nodes %v on PostgreSQL schema %s", len(cl.nodes), c.nodes, cl.schema)
	case cfg.Server == "":
		srv, err := startServer(ctx, opts.ServerArgv, c.serverFlags(), c.stderr)
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		c.base, c.secret, c.spawned = srv.URL, srv.Secret, true
		c.note("started server %s (pid %d, data %s)", srv.URL, srv.cmd.Process.Pid, srv.dir)
	default:
		c.nodes, _ = ParseServers(cfg.Server) // Validate checked it
	}
	if len(c.nodes) == 0 {
		c.nodes = []string{c.base}
	}
	c.base = c.nodes[0]
	c.spread = newSpreader(cfg.Seed, len(c.nodes))
	c.hc = newHTTPClient(256, nil)
	defer c.hc.CloseIdleConnections() // the server's shutdown waits for idle ones
	c.admin = client.NewAdmin(c.base, c.secret, c.hc)
	if err := c.healthy(ctx); err != nil {
		return nil, err
	}
	c.env = c.environment(ctx)
	c.sampler = &sampler{hc: c.hc, bases: c.nodes}
	if c.cluster != nil {
		c.sampler.extra = c.postgresSampler()
	}
	if len(c.nodes) > 1 && cfg.Bus == "" {
		c.note("%d nodes without a bus (--bus): a device receives what another node stored when it syncs again; "+
			"devices still behind after the load resync every %v", len(c.nodes), resyncEvery)
		if roomScenario(cfg.Scenario) {
			c.note("warning: %s's connections are bare WebSockets, which do not resync: without a bus, those on "+
				"another node than the sender's will miss its pushes (reported as violations)", cfg.Scenario)
		}
	}
	sctx, stopSampler := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSampler()
	go c.sampler.run(sctx)

	var (
		rep *Report
		err error
	)
	if cfg.Scenario == "reconnect" {
		if cfg.Procs > 1 {
			c.note("reconnect drives a few devices from this process; --procs is ignored")
			c.cfg.Procs = 1
		}
		rep, err = c.runReconnect(ctx)
	} else if cfg.Scenario == "presence" {
		if cfg.Procs > 1 {
			c.note("presence holds every connection in this process (it times changes across them); --procs is ignored")
			c.cfg.Procs = 1
		}
		rep, err = c.runPresence(ctx)
	} else {
		var p *plan
		if p, err = c.setup(ctx); err == nil {
			restore := c.yieldCPUs()
			rep, err = c.drive(ctx, p)
			restore()
		}
	}
	if err != nil {
		return nil, err
	}
	c.verdict(rep)
	return rep, nil
}

func (c *coord) setup(ctx context.Context) (*plan, error) {
	switch c.cfg.Scenario {
	case "direct":
		return c.setupDirect(ctx)
	case "group":
		return c.setupGroup(ctx)
	case "read-storm":
		return c.setupReadStorm(ctx)
	case "mixed":
		return c.setupMixed(ctx)
	case "idle":
		return c.setupIdle(ctx)
	case "echo":
		return c.setupEcho(ctx)
	case "largegroup":
		return c.setupLargeGroup(ctx)
	case "readstorm":
		return c.setupReadstorm(ctx)
	case "broadcast":
		return c.setupBroadcast(ctx)
	case "broadcast-naive":
		return c.setupNaiveBroadcast(ctx)
	}
	return nil, fmt.Errorf("unknown scenario %q", c.cfg.Scenario)
}

// serverFlags are the flags of the servers the bench starts beyond its own: the
// operator's --server-args and what the scenario needs.
func (c *coord) serverFlags() []string {
	cfg := c.cfg
	extra := append([]string{}, cfg.ServerArgs...)
	if cfg.Members > 500 {
		extra = append(extra, "--max-group-members", fmt.Sprint(cfg.Members))
	}
	if roomScenario(cfg.Scenario) && cfg.Members <= 500 {
		// A group this small stays in write fanout by default; these scenarios
		// measure read fanout, so the server switches it.
		extra = append(extra, "--write-fanout-max", fmt.Sprint(cfg.Members/2))
	}
	if cfg.Scenario == "presence" {
		extra = append(extra, "--presence-grace", cfg.Grace.String())
		c.debugAddr = flagValue(extra, "--debug-addr")
		if c.debugAddr == "" {
			// The memory figures collect the server's garbage first, through pprof.
			if c.debugAddr = freeLoopback(); c.debugAddr != "" {
				extra = append(extra, "--debug-addr", c.debugAddr)
			}
		}
	}
	if cfg.Scenario == "idle" && cfg.Conns > fdBudget {
		c.note("warning: the server started here may open about %d files; %d connections may not fit", fdBudget, cfg.Conns)
	}
	return extra
}

// healthy waits up to 10 s for GET /healthz to answer 200 on every node.
func (c *coord) healthy(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, base := range c.nodes {
		for {
			err := getOK(ctx, c.hc, base+"/healthz")
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("server %s not healthy: %w", base, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// scheduleKill SIGKILLs the cluster's last node KillNodeAfter into the load started at
// `at`, and tells the workers when. stop cancels it if it has not happened and waits.
func (c *coord) scheduleKill(ctx context.Context, hs []*handle, at time.Time) (stop func()) {
	if c.cluster == nil || c.cfg.KillNodeAfter <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !sleepUntil(ctx, at.Add(c.cfg.KillNodeAfter)) {
			return
		}
		victim := len(c.cluster.nodes) - 1
		t := time.Now()
		c.cluster.nodes[victim].Kill()
		c.killed = &victim
		c.note("killed node %d (%s) with SIGKILL", victim, c.nodes[victim])
		for _, h := range hs {
			_ = h.lw.send(wire{Op: opKill, Node: victim, At: t.UnixNano()})
		}
	}()
	return func() { cancel(); <-done }
}

// note prints a line on stderr, clearing the progress line first.
func (c *coord) note(format string, args ...any) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	if c.progLine {
		fmt.Fprint(c.stderr, "\r\x1b[K")
		c.progLine = false
	}
	fmt.Fprintf(c.stderr, "bench: "+format+"\n", args...)
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// handle is the coordinator's end of one worker.
type handle struct {
	id   int
	lw   *lineWriter
	prog atomic.Pointer[progress]
	stop func() // closes the worker's input and waits for it to end
	exit chan struct{}
}

// event is a message from worker id (op "exit" when its output ended).
type event struct {
	id int
	m  wire
}

// startWorkers starts one worker per job, in this process for a single job and as child
// processes otherwise.
func (c *coord) startWorkers(ctx context.Context, n int, events chan<- event) ([]*handle, error) {
	var hs []*handle
	for i := range n {
		var (
			h   *handle
			err error
		)
		if n == 1 {
			h = c.startInProcess(ctx, events)
		} else {
			h, err = c.startProcess(i, events)
		}
		if err != nil {
			for _, h := range hs {
				h.stop()
			}
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func (c *coord) forward(h *handle, out io.Reader, events chan<- event) {
	go func() {
		defer close(h.exit)
		for m := range readLines(out) {
			if m.Op == opProgress && m.Progress != nil {
				h.prog.Store(m.Progress)
				continue
			}
			events <- event{h.id, m}
		}
		events <- event{h.id, wire{Op: "exit"}}
	}()
}

func (c *coord) startInProcess(ctx context.Context, events chan<- event) *handle {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &handle{id: 0, lw: newLineWriter(inW), exit: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Work(wctx, inR, outW, c.opts.Hooks)
		outW.Close()
		inR.CloseWithError(errors.New("worker ended"))
	}()
	c.forward(h, outR, events)
	h.stop = func() {
		inW.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cancel()
			<-done
		}
		cancel()
		<-h.exit
	}
	return h
}

func (c *coord) startProcess(id int, events chan<- event) (*handle, error) {
	argv := c.opts.WorkerArgv
	if len(argv) == 0 {
		return nil, errors.New("--procs > 1 needs a worker command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.opts.WorkerEnv...)
	cmd.Env = append(cmd.Env, workerMaxProcs(os.Getenv("GOMAXPROCS"), runtime.NumCPU(), c.cfg.Procs)...)
	cmd.Stderr = c.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	h := &handle{id: id, lw: newLineWriter(in), exit: make(chan struct{})}
	c.forward(h, out, events)
	h.stop = func() {
		in.Close()
		select {
		case <-h.exit:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-h.exit
		}
		_ = cmd.Wait()
	}
	return h, nil
}

// collect waits for op from every worker, failing on a worker's failure or exit. onCancel,
// if not nil, runs once if ctx ends first, and the wait goes on (bounded by limit).
func collect(ctx context.Context, events <-chan event, n int, op string, limit time.Duration, onCancel func()) ([]wire, error) {
	out := make([]wire, n)
	have := make([]bool, n)
	got := 0
	timer := time.NewTimer(limit)
	defer timer.Stop()
	done := ctx.Done()
	for got < n {
		select {
		case e := <-events:
			switch e.m.Op {
			case op:
				out[e.id], have[e.id] = e.m, true
				got++
			case opFail:
				return nil, fmt.Errorf("worker %d: %s", e.id, e.m.Error)
			case "exit":
				if !have[e.id] { // a worker that answered may end before the others answer
					return nil, fmt.Errorf("worker %d ended before %s", e.id, op)
				}
			}
		case <-done:
			if onCancel == nil {
				return nil, ctx.Err()
			}
			onCancel()
			done = nil
		case <-timer.C:
			return nil, fmt.Errorf("workers did not report %s within %v", op, limit)
		}
	}
	return out, nil
}

// drive runs a plan through its workers and builds the report.
func (c *coord) drive(ctx context.Context, p *plan) (*Report, error) {
	n := len(p.jobs)
	events := make(chan event, 4*n)
	hs, err := c.startWorkers(ctx, n, events)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, h := range hs {
			h.stop()
		}
	}()
	for i, h := range hs {
		if err := h.lw.send(wire{Op: opJob, Job: p.jobs[i]}); err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	c.note("connecting devices")
	if _, err := collect(ctx, events, n, opReady, 30*time.Minute, nil); err != nil {
		return nil, err
	}
	if p.beforeLoad != nil {
		p.beforeLoad(ctx)
	}
	cpu0, _ := cpuNow()
	at := time.Now().Add(200 * time.Millisecond)
	for _, h := range hs {
		if err := h.lw.send(wire{Op: opStart, At: at.UnixNano()}); err != nil {
			return nil, err
		}
	}
	c.sampler.take(ctx)
	c.note("load started (%s)", c.describe())
	progDone := make(chan struct{})
	progStopped := make(chan struct{})
	go func() { defer close(progStopped); c.progress(hs, at, progDone) }()
	stopKill := c.scheduleKill(ctx, hs, at)
	stopAll := func() {
		c.note("interrupted: stopping the load, then draining")
		for _, h := range hs {
			_ = h.lw.send(wire{Op: opStop})
		}
	}
	limit := 24 * time.Hour
	if c.cfg.Duration > 0 && c.cfg.Messages == 0 {
		limit = c.cfg.Duration + 5*time.Minute
	}
	sent, err := collect(ctx, events, n, opSent, limit, stopAll)
	stopKill()
	close(progDone)
	<-progStopped
	if err != nil {
		return nil, err
	}
	loadEnd := time.Now()
	coordCPU := cpuSince(cpu0)
	c.sampler.take(context.WithoutCancel(ctx))
	var parts []map[string]*AckSummary
	var times []map[string][]SentAt
	for _, m := range sent {
		parts = append(parts, m.Acks)
		times = append(times, m.Times)
	}
	allTimes := mergeTimes(times...)
	if len(allTimes) == 0 {
		allTimes = nil
	}
	acks := MergeAcks(parts...)
	targets := map[string]int64{}
	for id, a := range acks {
		targets[id] = a.Max
	}
	if p.afterLoad != nil {
		p.afterLoad(context.WithoutCancel(ctx))
	}
	if p.hold > 0 {
		c.note("holding for %v", p.hold)
	} else {
		c.note("load done; waiting for receivers to catch up")
	}
	for _, h := range hs {
		if err := h.lw.send(wire{Op: opDrain, Targets: targets, Hold: p.hold, Times: allTimes}); err != nil {
			return nil, err
		}
	}
	var holdDone chan struct{}
	if p.endOfHold != nil && p.hold > 0 {
		holdDone = make(chan struct{})
		go func() {
			defer close(holdDone)
			if sleepUntil(ctx, loadEnd.Add(p.hold-min(p.hold/10, time.Second))) {
				p.endOfHold(ctx)
			}
		}()
	}
	results, err := collect(context.WithoutCancel(ctx), events, n, opResult, p.hold+c.cfg.DrainTimeout+5*time.Minute, nil)
	if holdDone != nil {
		<-holdDone
	}
	if err != nil {
		return nil, err
	}
	rep := c.newReport(p.opName, at, loadEnd)
	var recvs []RecvSummary
	for _, m := range results {
		rep.addResult(m.Result)
		recvs = append(recvs, m.Result.Recvs...)
		c.v.merge(m.Result.Violations, m.Result.ByKind, m.Result.Samples)
	}
	rep.ExpectedDeliveries = Check(c.v, acks, recvs)
	if c.cfg.Procs > 1 {
		rep.ClientCPUSeconds += coordCPU // the workers measured themselves; add the coordinator
	}
	c.serverFigures(rep, at, loadEnd)
	if p.finish != nil {
		p.finish(rep)
	}
	return rep, nil
}

// cpuSince returns the CPU seconds this process used since it had used cpu0.
func cpuSince(cpu0 time.Duration) float64 {
	now, _ := cpuNow()
	return (now - cpu0).Seconds()
}

// describe summarises the run's shape for the progress output.
func (c *coord) describe() string {
	cfg := c.cfg
	loop := "closed loop"
	if cfg.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g/s", cfg.Rate)
	}
	limit := fmt.Sprint(cfg.Duration)
	if cfg.Messages > 0 {
		limit = fmt.Sprintf("%d messages", cfg.Messages)
	}
	switch cfg.Scenario {
	case "direct":
		return fmt.Sprintf("%d pairs, %s, %s, %d procs", cfg.Pairs, loop, limit, cfg.Procs)
	case "group":
		return fmt.Sprintf("group of %d, %d online, %d senders, %s, %s, %d procs", cfg.Members, cfg.Online, cfg.Senders, loop, limit, cfg.Procs)
	case "read-storm":
		return fmt.Sprintf("group of %d, %d online, %d reads per round, %s, %d procs", cfg.Members, cfg.Online, cfg.Repeat, limit, cfg.Procs)
	case "idle":
		return fmt.Sprintf("%d connections, hold %v, %d procs", cfg.Conns, cfg.Duration, cfg.Procs)
	case "mixed":
		return fmt.Sprintf("%d users, %g actions/s, %s, %d procs", cfg.Users, cfg.Rate, limit, cfg.Procs)
	case "echo":
		return fmt.Sprintf("%d senders, %s, %s, %d procs", cfg.Senders, loop, limit, cfg.Procs)
	case "largegroup":
		return fmt.Sprintf("group of %d, %d online, %d open, %d senders, %s, %s, %d procs", cfg.Members, cfg.Online, cfg.Open, cfg.Senders, loop, limit, cfg.Procs)
	case "readstorm":
		return fmt.Sprintf("group of %d, %d reading at once, %d procs", cfg.Members, cfg.Online, cfg.Procs)
	case "broadcast", "broadcast-naive":
		return fmt.Sprintf("%d connections, all open, 1 sender, window %d, %s, %d procs", cfg.Members, cfg.Window, limit, cfg.Procs)
	case "presence":
		return fmt.Sprintf("%d users, %d subscriptions each, %g of them a minute away %v, grace %v, %s", cfg.Users, cfg.Subscriptions, cfg.Churn, cfg.Offline, cfg.Grace, limit)
	}
	return cfg.Scenario
}

// progress prints the live rate until done: redrawn in place on a terminal, a line every
// five seconds otherwise.
func (c *coord) progress(hs []*handle, at time.Time, done <-chan struct{}) {
	every := 5 * time.Second
	if c.opts.Terminal {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var lastOps, lastDel int64
	last := at
	for {
		select {
		case <-done:
			c.progMu.Lock()
			if c.progLine {
				fmt.Fprint(c.stderr, "\r\x1b[K")
				c.progLine = false
			}
			c.progMu.Unlock()
			return
		case <-t.C:
		}
		var p progress
		for _, h := range hs {
			if q := h.prog.Load(); q != nil {
				p.Ops += q.Ops
				p.Acked += q.Acked
				p.Delivered += q.Delivered
				p.Errors += q.Errors
				p.Violations += q.Violations
			}
		}
		now := time.Now()
		dt := now.Sub(last).Seconds()
		line := fmt.Sprintf("%6.1fs  ops %d (%.0f/s)  acked %d  delivered %d (%.0f/s)  errors %d  violations %d",
			now.Sub(at).Seconds(), p.Ops, float64(p.Ops-lastOps)/dt, p.Acked, p.Delivered,
			float64(p.Delivered-lastDel)/dt, p.Errors, p.Violations+c.v.Count())
		lastOps, lastDel, last = p.Ops, p.Delivered, now
		c.progMu.Lock()
		if c.opts.Terminal {
			fmt.Fprint(c.stderr, "\r\x1b[K"+line)
			c.progLine = true
		} else {
			fmt.Fprintln(c.stderr, "bench: "+line)
		}
		c.progMu.Unlock()
	}
}

// newReport starts the report of a run whose load went from at to end.
func (c *coord) newReport(opName string, at, end time.Time) *Report {
	r := &Report{
		Scenario:       c.cfg.Scenario,
		Config:         c.configOut(),
		Env:            c.env,
		Op:             opName,
		StartedAt:      at.UTC(),
		DurationS:      end.Sub(at).Seconds(),
		Errors:         map[string]int64{},
		Counts:         map[string]int64{},
		Extra:          map[string]float64{},
		ServerCounters: map[string]float64{},
		lat:            newHist(3),
		dlat:           newHist(3),
		interval:       c.interval(),
	}
	if c.spawned {
		r.Server = "spawned"
	} else {
		r.Server = c.cfg.Server
	}
	if len(c.nodes) > 1 || c.cluster != nil {
		r.Topology = &Topology{
			Nodes: c.nodes, Bus: redact.URL(c.cfg.Bus), Seed: c.cfg.Seed, DevicesPerNode: c.spread.perNode(), KilledNode: c.killed,
		}
		if c.cluster != nil {
			r.Topology.Store, r.Topology.Schema = "postgres", c.cluster.schema
		}
	}
	return r
}

// serverFigures fills the server's CPU and memory over the load window from /metrics.
func (c *coord) serverFigures(r *Report, from, to time.Time) {
	samples := c.sampler.window(from.Add(-1500*time.Millisecond), to.Add(500*time.Millisecond))
	st := statsOf(samples)
	if !st.OK {
		c.note("server metrics unavailable: %v", c.sampler.err)
		return
	}
	c.postgresFigures(r, samples)
	r.ServerCPUPct, r.ServerCPUSeconds = st.CPUPct, st.CPUSeconds
	r.ServerRSSBytes, r.ServerRSSStartBytes = st.RSSPeak, st.RSSStart
	for k, v := range st.Deltas {
		if len(k) > 7 && k[:7] == "parley_" {
			r.ServerCounters[k] = v
		}
	}
	for i := range r.Timeline {
		pt := &r.Timeline[i]
		end := from.Add(time.Duration(pt.T * float64(time.Second)))
		win := c.sampler.window(end.Add(-r.interval-time.Second), end.Add(500*time.Millisecond))
		if s := statsOf(win); s.OK {
			pt.ServerCPUPct, pt.ServerRSSBytes = s.CPUPct, s.RSSEnd
		}
	}
}

// mergeHist adds b (encoded) into h.
func mergeHist(h *hdrhistogram.Histogram, b []byte) {
	if x := decodeHist(b); x != nil {
		h.Merge(x)
	}
}

// workerMaxProcs returns the GOMAXPROCS setting for a worker process, unless the operator
// set one (set): the machine's cpus shared by the procs workers, at least one each. Each
// worker otherwise takes a P per CPU, and on a machine shared with the server the measured
// (two generator processes on 2 cores make 4 Ps of load threads beside the server's 2),
// the kernel time-slices more threads than there are cores, which adds tens of
// milliseconds to the server's tail latencies that are the generator's, not the server's
// (README, "Large groups").
func workerMaxProcs(set string, cpus, procs int) []string {
	if set != "" || procs < 2 {
		return nil
	}
	return []string{fmt.Sprintf("GOMAXPROCS=%d", max(1, cpus/procs))}
}

// yieldCPUs leaves the machine to the workers and the server while worker processes carry
// the load (--procs > 1): the coordinator only gathers their reports then, and with a P per
// CPU its threads would be time-sliced with theirs (see workerMaxProcs). It returns what
// restores the setting. An operator's own GOMAXPROCS is kept.
func (c *coord) yieldCPUs() (restore func()) {
	if c.cfg.Procs < 2 || os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(1)
	return func() { runtime.GOMAXPROCS(prev) }
}
