package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/gorilla/websocket"
)

// The presence scenario (docs/protocol.md 9.11) measures what presence costs a server whose
// users all watch their contacts:
//
//   - --users users, each with one bare WebSocket (as idle's: no SDK buffers in the way);
//   - the users in blocks of --subscriptions+1, each block one small group (write fanout,
//     so its members see each other's presence: one CreateGroup call per block, the fastest
//     setup the bench has); every user subscribes to the other --subscriptions of its block
//     (a last, short block overlaps the one before it, so everyone has a full set);
//   - phases, the server's /metrics sampled at each edge: connected without subscriptions
//     (idle), subscribed and idle (--idle-window), then churn for --duration, in which
//     --churn of the users per minute, spread evenly, close their WebSocket, stay away for
//     --offline (longer than the grace, so that the change is real) and reconnect and
//     subscribe again.
//
// Timed events: disconnect -> the watcher's frame saying offline, less --grace (the server
// holds offline back for the grace by design); and reconnect (handshake done) -> the
// watcher's frame saying online. Every presence push is counted per connection per wall
// second, and the largest count is reported. Presence CPU is the server's CPU share during
// the churn less its share while subscribed and idle; the connections' handshakes, auth and
// resubscriptions count as presence's, so it is an upper bound.

// presenceUser is one user of the scenario and its connection.
type presenceUser struct {
	acct    Account
	watched []string

	mu     sync.Mutex // guards ws and closing
	ws     *websocket.Conn
	gone   chan struct{} // closed when the reader of ws ends
	closed bool          // ws was closed by the bench

	discAt  atomic.Int64 // unix ns of the last disconnect by the bench (0: none)
	reconAt atomic.Int64 // unix ns of the reconnect after it (0: not yet)

	bucket atomic.Int64 // wall second of the frames counted in frames
	frames atomic.Int64 // presence pushes in that second
	last   atomic.Int64 // unix ns of the last presence push read
}

// presenceRun is the state of one run.
type presenceRun struct {
	c      *coord
	dialer *websocket.Dialer
	users  []*presenceUser
	byID   map[string]*presenceUser
	grace  time.Duration

	mu       sync.Mutex // guards the histograms
	offHist  *hdrhistogram.Histogram
	onHist   *hdrhistogram.Histogram
	maxRate  atomic.Int64 // most presence pushes one connection got in one second
	pushes   atomic.Int64 // presence pushes received
	offlines atomic.Int64 // offline changes of churned users received
	onlines  atomic.Int64 // online changes of churned users received
	other    atomic.Int64 // changes not caused by the churn (or seen after their time)
	early    atomic.Int64 // offline received before the grace ended
	dropped  atomic.Int64 // connections the server closed
	minGap   atomic.Int64 // shortest time between two pushes read on one connection (ns; 0: none yet)
	under1s  atomic.Int64 // pushes read less than a second after the one before on their connection
	failed   atomic.Int64 // dials or subscriptions that failed
	answered atomic.Int64 // presence_subscribe answers received, failed or not
}

// presenceFrame is what the bench reads of a server frame.
type presenceFrame struct {
	ID       string `json:"id"`
	Op       string `json:"op"`
	Code     int    `json:"code"`
	Error    string `json:"error"`
	Presence []struct {
		UserID string `json:"user_id"`
		State  string `json:"state"`
	} `json:"presence"`
}

func (c *coord) runPresence(ctx context.Context) (*Report, error) {
	cfg := c.cfg
	n, s := cfg.Users, cfg.Subscriptions
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.id("u", i)
	}
	t0 := time.Now()
	if err := c.createUsers(ctx, ids); err != nil {
		return nil, err
	}
	accts := accounts(ids, "d1")
	c.note("minting %d device tokens", n)
	if err := c.issueTokens(ctx, accts); err != nil {
		return nil, err
	}
	block := s + 1
	var starts []int
	for from := 0; from < n; from += block {
		starts = append(starts, min(from, n-block))
	}
	c.note("creating %d groups of %d", len(starts), block)
	err := parallel(ctx, len(starts), setupConc, func(k int) error {
		from := starts[k]
		g, err := c.as(accts[from]).CreateGroup(ctx, "bench "+c.runID, ids[from+1:from+block], false)
		if err != nil {
			return fmt.Errorf("create group: %w", err)
		}
		if g.Fanout == "read" {
			return fmt.Errorf("group %s is in read fanout, where presence is not shared: raise --write-fanout-max above %d", g.ConvID, block)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	setupS := time.Since(t0).Seconds()
	p := &presenceRun{
		c: c, grace: cfg.Grace, byID: map[string]*presenceUser{},
		offHist: newHist(3), onHist: newHist(3),
		dialer: &websocket.Dialer{
			HandshakeTimeout: 30 * time.Second,
			ReadBufferSize:   1024, WriteBufferSize: 1024,
		},
	}
	for k, from := range starts {
		for i := from; i < from+block; i++ {
			if k > 0 && i < starts[k-1]+block {
				continue // in the overlap: watches within the block before
			}
			u := &presenceUser{acct: accts[i]}
			for j := from; j < from+block; j++ {
				if j != i {
					u.watched = append(u.watched, ids[j])
				}
			}
			p.users = append(p.users, u)
			p.byID[ids[i]] = u
		}
	}
	defer p.closeAll()

	before := c.memSample(ctx)
	c.note("connecting %d WebSockets", n)
	err = parallel(ctx, n, 64, func(i int) error { return p.connect(ctx, p.users[i], false) })
	if err != nil {
		return nil, err
	}
	hctx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go p.heartbeat(hctx)
	settle := func() { sleepUntil(ctx, time.Now().Add(5*time.Second)) }
	settle()
	connected := c.memSample(ctx)
	c.note("subscribing each to %d users", s)
	err = parallel(ctx, n, 64, func(i int) error { return p.subscribe(p.users[i]) })
	if err != nil {
		return nil, err
	}
	// Every answer read before the sample: an answer not yet written (some 6 KB of 100
	// entries) would count in the server's heap as the subscriptions' cost.
	// A connection the server dropped never answers: past a minute, the sample is taken
	// anyway and says how many were missing.
	for until := time.Now().Add(time.Minute); p.answered.Load() < int64(n); {
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return nil, ctx.Err()
		}
		if time.Now().After(until) {
			c.note("sampling with %d of %d presence_subscribe answers unread", int64(n)-p.answered.Load(), n)
			break
		}
	}
	settle()
	subscribed := c.memSample(ctx)

	c.note("idle with subscriptions for %v", cfg.IdleWindow)
	idleAt := time.Now()
	c.sampler.take(ctx)
	sleepUntil(ctx, idleAt.Add(cfg.IdleWindow))
	c.sampler.take(ctx)
	idleEnd := time.Now()
	p.other.Store(0) // the online pushes of the connection phase are not the churn's

	events := int(float64(n) * cfg.Churn * cfg.Duration.Minutes())
	events = min(events, n)
	order := rand.Perm(n)
	c.note("churn: %d reconnects in %v (%.1f%% of users a minute), each away %v", events, cfg.Duration, 100*cfg.Churn, cfg.Offline)
	cpu0, _ := cpuNow()
	at := time.Now()
	c.sampler.take(ctx)
	var wg sync.WaitGroup
	for e := range events {
		if !sleepUntil(ctx, at.Add(time.Duration(e)*cfg.Duration/time.Duration(max(events, 1)))) {
			break
		}
		u := p.users[order[e]]
		wg.Go(func() {
			p.disconnect(u)
			if !sleepUntil(ctx, time.Now().Add(cfg.Offline)) {
				return
			}
			if err := p.connect(ctx, u, true); err != nil {
				c.note("reconnect %s: %v", u.acct.User, err)
			}
		})
	}
	sleepUntil(ctx, at.Add(cfg.Duration))
	c.sampler.take(ctx)
	loadEnd := time.Now()
	c.note("waiting for the last users away to come back")
	wg.Wait()
	sleepUntil(ctx, time.Now().Add(10*time.Second)) // the last changes' frames
	_, maxRSS := cpuNow()

	r := c.newReport("presence change -> watcher's frame", at, loadEnd)
	r.addResult(&Result{measures: newRecorder(c.interval()).export(), CPUSeconds: cpuSince(cpu0), MaxRSS: maxRSS})
	c.serverFigures(r, at, loadEnd)
	idle := statsOf(c.sampler.window(idleAt.Add(-1500*time.Millisecond), idleEnd.Add(500*time.Millisecond)))
	churn := statsOf(c.sampler.window(at.Add(-1500*time.Millisecond), loadEnd.Add(500*time.Millisecond)))
	r.Extra["setup_s"] = setupS
	r.Extra["users"] = float64(n)
	r.Extra["subscriptions_per_user"] = float64(s)
	r.Extra["churn_reconnects"] = float64(events)
	r.Extra["server_cpu_idle_subscribed_pct"] = idle.CPUPct
	r.Extra["server_cpu_churn_pct"] = churn.CPUPct
	r.Extra["presence_cpu_pct_of_core"] = churn.CPUPct - idle.CPUPct
	if before != nil && connected != nil && subscribed != nil {
		fn := float64(n)
		r.Extra["server_rss_per_conn_bytes"] = (connected[mRSS] - before[mRSS]) / fn
		r.Extra["server_rss_per_conn_subscribed_bytes"] = (subscribed[mRSS] - before[mRSS]) / fn
		r.Extra["subscriptions_rss_per_conn_bytes"] = (subscribed[mRSS] - connected[mRSS]) / fn
		// After a collection (memSample), the heap in use is the live heap: the figure that
		// does not move with the collector's timing, as RSS does.
		r.Extra["subscriptions_heap_per_conn_bytes"] = (subscribed[mHeapInuse] - connected[mHeapInuse]) / fn
		r.Extra["server_heap_per_conn_bytes"] = (connected[mHeapInuse] - before[mHeapInuse]) / fn
		r.Extra["server_heap_per_conn_subscribed_bytes"] = (subscribed[mHeapInuse] - before[mHeapInuse]) / fn
		if c.debugAddr != "" {
			r.Extra["memory_after_gc"] = 1
		}
	}
	p.mu.Lock()
	off, on := percentiles(p.offHist), percentiles(p.onHist)
	all := newHist(3)
	all.Merge(p.offHist)
	all.Merge(p.onHist)
	r.lat = all
	p.mu.Unlock()
	r.Extra["offline_after_grace_p50_ms"], r.Extra["offline_after_grace_p99_ms"], r.Extra["offline_after_grace_max_ms"] = off.P50, off.P99, off.Max
	r.Extra["online_p50_ms"], r.Extra["online_p99_ms"], r.Extra["online_max_ms"] = on.P50, on.P99, on.Max
	r.Extra["change_p99_ms"] = percentiles(all).P99
	r.Extra["offline_frames"] = float64(p.offlines.Load())
	r.Extra["online_frames"] = float64(p.onlines.Load())
	r.Extra["expected_changes_per_kind"] = float64(events * s)
	r.Extra["other_changes"] = float64(p.other.Load())
	r.Extra["offline_before_grace"] = float64(p.early.Load())
	r.Extra["presence_pushes"] = float64(p.pushes.Load())
	r.Extra["max_presence_frames_per_conn_per_sec"] = float64(p.maxRate.Load())
	// Wall-second buckets can hold two pushes a second apart less a late tick's delay; the
	// gaps between consecutive pushes tell the server's pacing from that.
	r.Extra["min_presence_frame_gap_ms"] = msOf(time.Duration(p.minGap.Load()))
	r.Extra["presence_frames_under_1s_apart"] = float64(p.under1s.Load())
	r.Extra["dropped"] = float64(p.dropped.Load())
	r.Extra["failed"] = float64(p.failed.Load())
	r.Ops, r.Deliveries = int64(events), p.offlines.Load()+p.onlines.Load()
	if d := loadEnd.Sub(at).Seconds(); d > 0 {
		r.OpsPerSec = float64(events) / d
	}
	r.Latency = percentiles(all)
	return r, nil
}

// connect opens u's WebSocket; resub (a reconnect) subscribes again at once, as a client
// would, and marks the reconnect time.
func (p *presenceRun) connect(ctx context.Context, u *presenceUser, resub bool) error {
	a := u.acct
	h := http.Header{"Authorization": {"Bearer " + a.Token}}
	ws, resp, err := p.dialer.DialContext(ctx, wsBase(p.c.nodeURL(a))+"/v1/ws?token="+url.QueryEscape(a.Token), h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		p.failed.Add(1)
		return fmt.Errorf("dial %s: %w", a.User, err)
	}
	if resub {
		u.reconAt.Store(time.Now().UnixNano())
	}
	gone := make(chan struct{})
	u.mu.Lock()
	u.ws, u.gone, u.closed = ws, gone, false
	u.mu.Unlock()
	go p.read(u, ws, gone)
	if resub {
		return p.subscribe(u)
	}
	return nil
}

func (p *presenceRun) subscribe(u *presenceUser) error {
	b, _ := json.Marshal(map[string]any{"id": "sub", "op": "presence_subscribe", "users": u.watched, "replace": true})
	return p.write(u, b)
}

func (p *presenceRun) write(u *presenceUser, b []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ws == nil || u.closed {
		return nil
	}
	_ = u.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := u.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		p.failed.Add(1)
		return fmt.Errorf("write %s: %w", u.acct.User, err)
	}
	return nil
}

// read counts and times the presence pushes u's connection receives.
func (p *presenceRun) read(u *presenceUser, ws *websocket.Conn, gone chan struct{}) {
	defer close(gone)
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			u.mu.Lock()
			closed := u.closed
			u.mu.Unlock()
			if !closed {
				p.dropped.Add(1)
			}
			return
		}
		now := time.Now()
		var f presenceFrame
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		if f.ID == "sub" {
			p.answered.Add(1)
		}
		if f.ID == "sub" && f.Code != 0 {
			p.failed.Add(1)
			p.c.note("presence_subscribe of %s: %d %s", u.acct.User, f.Code, f.Error)
			continue
		}
		if f.Op != "presence" {
			continue
		}
		p.pushes.Add(1)
		if prev := u.last.Swap(now.UnixNano()); prev != 0 {
			gap := now.UnixNano() - prev
			if gap < int64(time.Second) {
				p.under1s.Add(1)
			}
			for {
				m := p.minGap.Load()
				if (m != 0 && gap >= m) || p.minGap.CompareAndSwap(m, gap) {
					break
				}
			}
		}
		sec := now.Unix()
		if u.bucket.Swap(sec) != sec {
			u.frames.Store(0)
		}
		if k := u.frames.Add(1); k > p.maxRate.Load() {
			for {
				m := p.maxRate.Load()
				if k <= m || p.maxRate.CompareAndSwap(m, k) {
					break
				}
			}
		}
		for _, ch := range f.Presence {
			p.change(ch.UserID, ch.State, now)
		}
	}
}

// change times one user's change as a watcher saw it.
func (p *presenceRun) change(user, state string, now time.Time) {
	w := p.byID[user]
	if w == nil {
		p.other.Add(1)
		return
	}
	disc, recon := w.discAt.Load(), w.reconAt.Load()
	switch {
	case state == "offline" && disc != 0 && (recon == 0 || recon < disc):
		due := time.Unix(0, disc).Add(p.grace)
		if now.Before(due) {
			p.early.Add(1)
			return
		}
		p.offlines.Add(1)
		p.mu.Lock()
		_ = p.offHist.RecordValue(micros(now.Sub(due)))
		p.mu.Unlock()
	case state == "online" && recon != 0 && recon > disc:
		p.onlines.Add(1)
		p.mu.Lock()
		_ = p.onHist.RecordValue(micros(now.Sub(time.Unix(0, recon))))
		p.mu.Unlock()
	default:
		p.other.Add(1)
	}
}

// disconnect closes u's connection as a client going away would, and marks the time.
func (p *presenceRun) disconnect(u *presenceUser) {
	u.mu.Lock()
	ws, gone := u.ws, u.gone
	u.closed = true
	if ws != nil {
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	}
	u.mu.Unlock()
	u.reconAt.Store(0)
	u.discAt.Store(time.Now().UnixNano())
	if ws != nil {
		ws.Close()
		<-gone
	}
}

// heartbeat pings the server on every connection once per Heartbeat, spread evenly, as the
// idle scenario does.
func (p *presenceRun) heartbeat(ctx context.Context) {
	frame := []byte(`{"id":"hb","op":"ping"}`)
	gap := p.c.cfg.Heartbeat / time.Duration(len(p.users))
	next := time.Now()
	for ctx.Err() == nil {
		for _, u := range p.users {
			next = next.Add(gap)
			if !sleepUntil(ctx, next) {
				return
			}
			_ = p.write(u, frame)
		}
	}
}

func (p *presenceRun) closeAll() {
	_ = parallel(context.Background(), len(p.users), 64, func(i int) error {
		p.disconnect(p.users[i])
		return nil
	})
}

// memSample scrapes the server's metrics after a garbage collection, which the heap
// profile of its pprof address runs (?gc=1), when the bench knows that address.
func (c *coord) memSample(ctx context.Context) metricSet {
	if c.debugAddr != "" {
		if err := getOK(ctx, c.hc, "http://"+c.debugAddr+"/debug/pprof/heap?gc=1"); err != nil {
			c.note("server GC through pprof: %v", err)
		}
	}
	return c.sampler.take(ctx)
}

// flagValue returns the value of flag name in args ("--name v" or "--name=v"), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// freeLoopback returns a loopback address with a port free now, or "".
func freeLoopback() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}
