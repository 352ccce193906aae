package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/protocol"
)

// The echo scenario is the baseline: the bare WebSocket transport of this machine. A child
// process of the same binary (EchoServer) echoes every frame it reads, with the gateway's
// upgrader settings and nothing else: no authentication, no parsing, no storage, no fan-out.
// The load side is direct's closed loop (or open loop with a rate): each sender writes the
// very frame the SDK would write for a send of --size content bytes and waits for it to come
// back. What Parley achieves over what this achieves is the cost of Parley itself.

// echoPath is where the echo server accepts WebSockets.
const echoPath = "/echo"

// broadcastPath is where the same server accepts the WebSockets of broadcast's baseline
// (broadcast-naive): every frame read on one of them is written to all of them.
const broadcastPath = "/broadcast"

// EchoServer runs the echo scenario's server on addr (127.0.0.1:0 if empty) until ctx
// ends: WebSockets on /echo send back every message as it came, those on /broadcast send
// every message to every /broadcast connection (the naive broadcast), /healthz answers 200 and
// /metrics gives the process's CPU and memory as `parley serve` does. It prints "listening
// on http://ADDR" on stdout once it accepts connections.
func EchoServer(ctx context.Context, addr string, stdout io.Writer) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	up := websocket.Upgrader{ // as the gateway's (internal/gateway/ws.go)
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   1024,
		WriteBufferPool:  &sync.Pool{},
		CheckOrigin:      func(*http.Request) bool { return true },
	}
	var (
		mu     sync.Mutex // guards conns
		conns  = map[*websocket.Conn]struct{}{}
		served sync.WaitGroup
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc(echoPath, func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // the upgrader answered
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			ws.Close()
			return
		}
		conns[ws] = struct{}{}
		served.Add(1)
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(conns, ws)
			mu.Unlock()
			ws.Close()
			served.Done()
		}()
		ws.SetReadLimit(protocol.MaxFrameBytes)
		for {
			mt, p, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if err := ws.WriteMessage(mt, p); err != nil {
				return
			}
		}
	})
	mux.Handle(broadcastPath, newNaiveBroadcast(ctx, &up, &mu, conns, &served))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "parley-bench echo server listening on http://%s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-done:
		return err
	}
	_ = srv.Close() // the listener; hijacked WebSockets are closed below
	mu.Lock()
	for ws := range conns {
		ws.Close()
	}
	mu.Unlock()
	served.Wait()
	return nil
}

// startEcho runs argv (the parley binary and the hidden echo-server command) with env added
// to its environment and waits for its address.
func startEcho(ctx context.Context, argv, env []string, stderr io.Writer) (*localServer, error) {
	if len(argv) == 0 {
		return nil, errors.New("echo needs an echo-server command")
	}
	s := &localServer{exited: make(chan struct{})}
	if err := s.start(ctx, exec.Command(argv[0], argv[1:]...), env, stderr); err != nil {
		return nil, err
	}
	return s, nil
}

// setupEcho: Senders connections, dealt to workers in turn, each sending on its own.
func (c *coord) setupEcho(context.Context) (*plan, error) {
	n := c.cfg.Senders
	jobs := c.baseJobs()
	for i := range n {
		j := jobs[i%len(jobs)]
		j.Senders = append(j.Senders, SenderSpec{
			Device: i, Conv: echoConvID(i),
			Quota: quota(c.cfg.Messages, n, i), Rate: c.cfg.Rate / float64(n),
		})
	}
	p := &plan{jobs: jobs, opName: "round trip"}
	p.finish = func(r *Report) {
		r.Extra["round_trips_per_sec"] = r.AckedPerSec
		l := &echoLoad{w: &worker{job: jobs[0]}}
		r.Extra["frame_bytes"] = float64(len(l.frame(&frameBuf{}, echoConvID(0), time.Now())))
	}
	return p, nil
}

// echoConvID is a stand-in conv_id as long as the ones Parley assigns ("d_" and 26 more).
func echoConvID(i int) string { return fmt.Sprintf("e_%026d", i) }

// frameBuf holds one sender's frame and its parts, reused from one frame to the next.
type frameBuf struct{ content, body, frame []byte }

// echoLoad is the worker side of echo: one WebSocket per sender.
type echoLoad struct {
	w      *worker
	url    string
	dialer *websocket.Dialer
	conns  []*websocket.Conn // by sender
	seq    atomic.Uint64     // frame ids
}

func newEchoLoad(w *worker) *echoLoad {
	d := &websocket.Dialer{HandshakeTimeout: 30 * time.Second} // as the SDK's (client/client.go newDialer)
	if t, ok := w.hc.Transport.(*http.Transport); ok {
		d.NetDialContext = t.DialContext
	}
	return &echoLoad{
		w: w, dialer: d, conns: make([]*websocket.Conn, len(w.job.Senders)),
		url: wsBase(w.job.Server) + echoPath,
	}
}

func (l *echoLoad) dial(ctx context.Context) (*websocket.Conn, error) {
	ws, resp, err := l.dialer.DialContext(ctx, l.url, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return ws, err
}

func (l *echoLoad) prepare(ctx context.Context) error {
	return parallel(ctx, len(l.conns), 32, func(i int) error {
		ws, err := l.dial(ctx)
		if err != nil {
			return fmt.Errorf("connect to the echo server: %w", err)
		}
		l.conns[i] = ws
		return nil
	})
}

func (l *echoLoad) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := l.w.loadContext(ctx, at, stop)
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range l.w.job.Senders {
		if s.Quota < 0 {
			continue
		}
		if s.Rate > 0 {
			wg.Go(func() { l.openLoop(lctx, i, s, at) })
		} else {
			wg.Go(func() { l.closedLoop(lctx, i, s) })
		}
	}
	wg.Wait()
}

// frame builds in b the next frame into conv, stamped with intended: the frame the SDK
// writes for a send (client/send.go: protocol.AppendSendRequest, then protocol.AppendFrame),
// under a fresh client_msg_id and frame id. It is valid until b is used again.
func (l *echoLoad) frame(b *frameBuf, conv string, intended time.Time) []byte {
	id := "r" + strconv.FormatUint(l.seq.Add(1), 36)
	b.content = l.w.appendContent(b.content[:0], intended)
	req := protocol.SendRequest{ConvID: conv, ClientMsgID: client.NewClientMsgID(), ContentType: client.ContentText, Content: b.content}
	b.body = protocol.AppendSendRequest(b.body[:0], &req)
	b.frame = protocol.AppendFrame(b.frame[:0], id, protocol.OpSend, b.body)
	return b.frame
}

// closedLoop sends one frame at a time, each after the previous one came back.
func (l *echoLoad) closedLoop(ctx context.Context, i int, s SenderSpec) {
	var b frameBuf
	for n := int64(0); (s.Quota == 0 || n < s.Quota) && ctx.Err() == nil; n++ {
		if !l.roundTrip(ctx, i, s, &b, time.Now()) {
			sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) // no hot loop on a failing server
		}
	}
}

// roundTrip writes one frame on sender i's connection and reads it back. A connection that
// fails is reported, and replaced for the next round trip.
func (l *echoLoad) roundTrip(ctx context.Context, i int, s SenderSpec, b *frameBuf, intended time.Time) bool {
	ws := l.conns[i]
	if ws == nil {
		var err error
		if ws, err = l.dial(ctx); err != nil {
			l.w.rec.fail(err)
			return false
		}
		l.conns[i] = ws
	}
	frame := l.frame(b, s.Conv, intended)
	_ = ws.SetWriteDeadline(time.Now().Add(time.Minute))
	err := ws.WriteMessage(websocket.TextMessage, frame)
	var got []byte
	if err == nil {
		_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
		_, got, err = ws.ReadMessage()
	}
	now := time.Now()
	if err != nil {
		l.w.rec.fail(err)
		l.w.v.Reportf(VDropped, fmt.Sprintf("echo/%d", i), "", "echo connection failed: %v", err)
		ws.Close()
		l.conns[i] = nil
		return false
	}
	l.check(i, frame, got)
	l.w.rec.op(now, now.Sub(intended))
	l.w.rec.ack(now)
	return true
}

func (l *echoLoad) check(i int, sent, got []byte) {
	if !bytes.Equal(sent, got) {
		l.w.v.Reportf(VMismatch, fmt.Sprintf("echo/%d", i), "", "echoed %d bytes differ from the %d sent", len(got), len(sent))
	}
}

// openLoop writes at s.Rate on a fixed schedule, up to maxInFlight frames not yet back,
// while a reader takes the echoes in order; latency counts from the scheduled time.
func (l *echoLoad) openLoop(ctx context.Context, i int, s SenderSpec, at time.Time) {
	ws := l.conns[i]
	type sent struct {
		intended time.Time
		frame    []byte
	}
	pending := make(chan sent, maxInFlight)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		failed := false
		for p := range pending {
			if failed {
				l.w.rec.fail(errors.New("echo connection lost"))
				continue
			}
			_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
			_, got, err := ws.ReadMessage()
			now := time.Now()
			if err != nil {
				l.w.rec.fail(err)
				l.w.v.Reportf(VDropped, fmt.Sprintf("echo/%d", i), "", "echo connection failed: %v", err)
				failed = true
				ws.Close()
				continue
			}
			l.check(i, p.frame, got)
			l.w.rec.op(now, now.Sub(p.intended))
			l.w.rec.ack(now)
		}
	}()
	defer func() { close(pending); <-readerDone }()
	interval := time.Duration(float64(time.Second) / s.Rate)
	next := at.Add(time.Duration(rand.Int64N(int64(max(interval, 1))))) // spread senders out
	var b frameBuf
	for n := int64(0); s.Quota == 0 || n < s.Quota; n++ {
		if !sleepUntil(ctx, next) {
			return
		}
		p := sent{intended: next, frame: bytes.Clone(l.frame(&b, s.Conv, next))} // kept until it comes back
		select {
		case pending <- p: // blocks while maxInFlight are out
		case <-ctx.Done():
			return
		}
		_ = ws.SetWriteDeadline(time.Now().Add(time.Minute))
		if err := ws.WriteMessage(websocket.TextMessage, p.frame); err != nil {
			ws.Close() // the reader fails the frames still pending
			return
		}
		next = next.Add(interval)
	}
}

// drain closes the connections politely.
func (l *echoLoad) drain(context.Context, map[string]int64, time.Duration) {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	for _, ws := range l.conns {
		if ws != nil {
			_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			ws.Close()
		}
	}
}

// naiveBroadcast is the baseline of the broadcast scenario: what a chat server without
// storage, authentication, queues or coalescing does with a message for a room where every
// member is listening. Each frame read is made a websocket.PreparedMessage (framed once, as
// Parley encodes a push once) and written to every connection in turn, by the goroutine that
// read it, before it reads the next one.
type naiveBroadcast struct {
	ctx    context.Context
	up     *websocket.Upgrader
	mu     *sync.Mutex // the echo server's: guards all and shutdown's set
	all    map[*websocket.Conn]struct{}
	served *sync.WaitGroup

	room atomic.Pointer[[]*roomMember] // copied on every join and leave, read without a lock
	join sync.Mutex                    // serialises the copies
}

// roomMember is one connection of the naive broadcast.
type roomMember struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time: every sender's goroutine writes to it
}

func newNaiveBroadcast(ctx context.Context, up *websocket.Upgrader, mu *sync.Mutex, all map[*websocket.Conn]struct{}, served *sync.WaitGroup) *naiveBroadcast {
	b := &naiveBroadcast{ctx: ctx, up: up, mu: mu, all: all, served: served}
	b.room.Store(&[]*roomMember{})
	return b
}

// change adds m to the room, or removes it.
func (b *naiveBroadcast) change(m *roomMember, add bool) {
	b.join.Lock()
	defer b.join.Unlock()
	old := *b.room.Load()
	next := make([]*roomMember, 0, len(old)+1)
	for _, x := range old {
		if x != m {
			next = append(next, x)
		}
	}
	if add {
		next = append(next, m)
	}
	b.room.Store(&next)
}

func (b *naiveBroadcast) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, err := b.up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	b.mu.Lock()
	if b.ctx.Err() != nil {
		b.mu.Unlock()
		ws.Close()
		return
	}
	b.all[ws] = struct{}{}
	b.served.Add(1)
	b.mu.Unlock()
	m := &roomMember{ws: ws}
	b.change(m, true)
	defer func() {
		b.change(m, false)
		b.mu.Lock()
		delete(b.all, ws)
		b.mu.Unlock()
		ws.Close()
		b.served.Done()
	}()
	ws.SetReadLimit(protocol.MaxFrameBytes)
	for {
		mt, p, err := ws.ReadMessage()
		if err != nil {
			return
		}
		pm, err := websocket.NewPreparedMessage(mt, p)
		if err != nil {
			return
		}
		for _, x := range *b.room.Load() {
			x.mu.Lock()
			_ = x.ws.SetWriteDeadline(time.Now().Add(time.Minute))
			_ = x.ws.WritePreparedMessage(pm) // a failed socket ends its own reader
			x.mu.Unlock()
		}
	}
}
