package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/parleychat/parley/client"
)

// Several nodes: what the devices of a worker do when a node dies (--kill-node-after) and,
// on nodes without a bus, to receive what other nodes stored.
//
// A worker knows every node (Job.Nodes) and watches their health: it probes each one's
// /healthz every healthEvery, and at once when a send fails without an answer. A node that
// refuses connections is dead; its devices move to the next live node in the list, resume
// from their cursor there (the node replays every event after it from the shared store) and
// make the sends that were under way again under the same client_msg_id (the store keeps
// one message per sender and id, and answers a repeat with the original ack). The time
// from the kill until every device of the killed node is caught up is the figure.

// healthEvery is how often a worker probes every node.
const healthEvery = 200 * time.Millisecond

// deadAfter is how many probes in a row must fail without a refusal (each given 2 s) for a
// node to count as dead: a node that refuses connections is dead at once, one slow to
// answer may only be busy.
const deadAfter = 5

// nodeHealth is a worker's view of which nodes are alive.
type nodeHealth struct {
	w    *worker
	poke chan struct{}

	mu    sync.Mutex // guards dead and fails
	dead  []bool
	fails []int
}

func newNodeHealth(w *worker) *nodeHealth {
	n := len(w.job.Nodes)
	return &nodeHealth{w: w, poke: make(chan struct{}, 1), dead: make([]bool, n), fails: make([]int, n)}
}

// run probes the nodes until ctx ends, moving the devices off each node found dead.
func (h *nodeHealth) run(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.poke:
		}
		for i := range h.w.job.Nodes {
			if h.alive(i) && !h.probe(ctx, i) {
				h.w.rec.count("nodes_found_dead", 1)
				h.w.moveOff(ctx, i)
			}
		}
	}
}

// suspect asks for a probe now.
func (h *nodeHealth) suspect() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// probe checks node i and reports whether it is still alive.
func (h *nodeHealth) probe(ctx context.Context, i int) bool {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := getOK(pctx, h.w.hc, h.w.job.Nodes[i]+"/healthz")
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.fails[i] = 0
	case errors.Is(err, syscall.ECONNREFUSED):
		h.dead[i] = true
	case ctx.Err() == nil:
		h.fails[i]++
		h.dead[i] = h.fails[i] >= deadAfter
	}
	return !h.dead[i]
}

func (h *nodeHealth) alive(i int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.dead[i]
}

// next returns the first live node after i in the list, round; i itself if none is.
func (h *nodeHealth) next(i int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := 1; k < len(h.dead); k++ {
		if j := (i + k) % len(h.dead); !h.dead[j] {
			return j
		}
	}
	return i
}

// watchHealth starts the health watch; the returned stop ends it and waits for the moves
// under way.
func (w *worker) watchHealth(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.health.run(ctx) }()
	return func() { cancel(); <-done }
}

// getOK answers nil when GET u answers 200.
func getOK(ctx context.Context, hc *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("GET " + u + ": " + resp.Status)
	}
	return nil
}

// moveOff moves every device on node dead to the next live node.
func (w *worker) moveOff(ctx context.Context, dead int) {
	to := w.health.next(dead)
	if to == dead {
		return
	}
	_ = parallel(ctx, len(w.devs), 32, func(i int) error {
		w.devs[i].move(ctx, dead, to)
		return nil
	})
}

// move takes the device from node `from`, if it is there, to node `to`: its sends under way
// are stopped and made again there (over HTTP until the new session is up), and its session
// resumes there from the cursor the old one reached.
func (d *device) move(ctx context.Context, from, to int) {
	d.switchMu.Lock()
	defer d.switchMu.Unlock()
	d.mu.Lock()
	if d.node != from {
		d.mu.Unlock()
		return
	}
	old, leave := d.cl, d.leave
	d.node = to
	d.cl = d.newClient(to, 0) // for sends until the session is up; it never connects
	d.here, d.leave = context.WithCancel(context.Background())
	d.mu.Unlock()
	leave()
	_ = old.Close() // it was redialling a dead node: whatever it says is moot
	d.w.rec.count("failovers", 1)
	if !d.spec.Online {
		return
	}
	cl := d.newClient(to, old.Cursor())
	for attempt := 0; ; attempt++ {
		err := cl.Connect(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || attempt == 20 {
			d.w.rec.fail(err)
			return
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
	d.mu.Lock()
	d.cl = cl
	d.mu.Unlock()
}

// session returns the device's client and the context that ends when it leaves its node.
func (d *device) session() (*client.Client, context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cl, d.here
}

// send sends a text message into conv. With Failover, a send cut short because the device
// moved to another node is made again there under the same client_msg_id.
func (d *device) send(ctx context.Context, conv string, content json.RawMessage) (client.MessageAck, error) {
	if !d.w.job.Failover {
		return d.client().Send(ctx, conv, client.ContentText, content, nil)
	}
	id := client.NewClientMsgID()
	n := d.sends.begin(time.Now())
	for {
		cl, here := d.session()
		sctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(here, cancel)
		ack, err := cl.SendWithID(sctx, id, conv, client.ContentText, content, nil)
		stop()
		cancel()
		if err != nil && ctx.Err() == nil && here.Err() != nil {
			d.w.rec.count("resent_on_another_node", 1)
			continue
		}
		if err == nil && ack.Duplicate {
			d.w.rec.count("resent_duplicates", 1) // stored by the dead node before it died: its original ack
		}
		d.sends.end(n, conv, ack, err)
		return ack, err
	}
}

// sendLog follows a device's sends under way, so that a kill can tell which of them it
// interrupted, and which seqs they were given once they were made again.
type sendLog struct {
	mu      sync.Mutex // guards the fields below
	next    uint64
	started map[uint64]time.Time // sends under way, by number
	pending map[uint64]bool      // sends under way at the kill
	raised  map[string]int64     // the highest seq per conversation of those acked since
}

// begin records a send started at t and returns its number.
func (l *sendLog) begin(t time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started == nil {
		l.started = map[uint64]time.Time{}
	}
	l.next++
	l.started[l.next] = t
	return l.next
}

// end records the outcome of send n into conv.
func (l *sendLog) end(n uint64, conv string, ack client.MessageAck, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.started, n)
	if !l.pending[n] {
		return
	}
	delete(l.pending, n)
	if err == nil {
		l.raised[conv] = max(l.raised[conv], ack.Seq)
	}
}

// killed marks the sends started before at as interrupted by the kill.
func (l *sendLog) killed(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending, l.raised = map[uint64]bool{}, map[string]int64{}
	for n, t := range l.started {
		if t.Before(at) {
			l.pending[n] = true
		}
	}
}

// targets returns base raised by the acks of the interrupted sends, and whether all of
// them have ended.
func (l *sendLog) targets(base map[string]int64) (map[string]int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		return nil, false
	}
	out := make(map[string]int64, len(base)+len(l.raised))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range l.raised {
		out[k] = max(out[k], v)
	}
	return out, true
}

// killWatch measures how long the devices of a killed node take to be caught up again.
type killWatch struct {
	stop    chan struct{} // closed at the end of the drain: who has not caught up by then never did
	stopped sync.Once
	wg      sync.WaitGroup
}

func newKillWatch() *killWatch { return &killWatch{stop: make(chan struct{})} }

// killed starts the watch of node's devices, the node having been killed at `at`: each is
// caught up once its sends interrupted by the kill are acked and it holds every message
// acked before the kill in its conversations (and those interrupted sends' too).
func (w *worker) killed(node int, at time.Time) {
	base := w.ledger.Max()
	for _, d := range w.devs {
		if d.spec.Node != node {
			continue
		}
		d.sends.killed(at)
		w.rec.count("killnode_devices", 1)
		w.kill.wg.Go(func() { w.watchCatchUp(d, at, base) })
	}
}

// watchCatchUp waits until d is caught up after the kill at `at`, or the watch ends.
func (w *worker) watchCatchUp(d *device, at time.Time, base map[string]int64) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	lastSync := time.Now()
	for {
		if targets, ok := d.sends.targets(base); ok && d.stream.Holds(targets) {
			w.rec.latency("killnode_catchup", time.Since(at))
			w.rec.count("killnode_caught_up", 1)
			return
		}
		select {
		case <-w.kill.stop:
			w.rec.count("killnode_not_caught_up", 1)
			return
		case <-t.C:
		}
		if w.job.Resync && time.Since(lastSync) >= time.Second && d.spec.Online {
			// Without a bus the device's node is not told of what the others store: sync.
			w.resync(context.Background(), d)
			lastSync = time.Now()
		}
	}
}

// endKillWatch stops the watches and waits for them to record their outcome.
func (w *worker) endKillWatch() {
	if w.kill == nil {
		return
	}
	w.kill.stopped.Do(func() { close(w.kill.stop) })
	w.kill.wg.Wait()
}

// resync has d sync again by reconnecting from its cursor, which replays every event after
// it from the store.
func (w *worker) resync(ctx context.Context, d *device) {
	w.rec.count("resyncs", 1)
	octx, cancel := opContext(ctx)
	defer cancel()
	if err := d.reconnect(octx); err != nil {
		w.rec.fail(err)
	}
}

// resyncEvery is how often devices waiting for messages sync again on nodes without a bus.
const resyncEvery = time.Second

// resyncWhileBehind has the online devices that do not hold targets sync again, now and
// every resyncEvery, until the returned stop is called (see Job.Resync).
func (w *worker) resyncWhileBehind(ctx context.Context, targets map[string]int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_ = parallel(ctx, len(w.devs), 32, func(i int) error {
				if d := w.devs[i]; d.spec.Online && !d.stream.Holds(targets) {
					w.resync(ctx, d)
				}
				return nil
			})
			if !sleepUntil(ctx, time.Now().Add(resyncEvery)) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
