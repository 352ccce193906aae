package bench

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// idle is the worker side of the idle scenario: it opens bare WebSockets (no SDK session,
// whose buffers would make the generator, not the server, the thing measured), answers the
// server's pings, pings it every Heartbeat, and holds them.
//
// Each connection costs this process one file and one goroutine; the coordinator spreads
// connections so that no process opens more than fdBudget.
type idle struct {
	w      *worker
	dialer *websocket.Dialer

	mu    sync.Mutex // guards conns
	conns []*idleConn

	closing atomic.Bool
	readers sync.WaitGroup
}

type idleConn struct {
	ws      *websocket.Conn
	writeMu sync.Mutex // one writer at a time (heartbeat vs close)
}

func newIdle(w *worker) *idle {
	return &idle{
		w: w,
		dialer: &websocket.Dialer{
			HandshakeTimeout: 30 * time.Second,
			ReadBufferSize:   1024, WriteBufferSize: 1024,
			NetDialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		},
	}
}

func (l *idle) prepare(context.Context) error { return nil }

// run opens the connections, 64 at a time; the load phase is the setup, so its rate is the
// connection setup rate and its latency the handshake time.
func (l *idle) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-lctx.Done():
		}
	}()
	_ = parallel(lctx, len(l.w.job.Conns), 64, func(i int) error {
		l.open(lctx, l.w.job.Conns[i])
		return nil
	})
	go l.heartbeat(ctx)
}

func (l *idle) open(ctx context.Context, a Account) {
	t0 := time.Now()
	h := http.Header{"Authorization": {"Bearer " + a.Token}}
	ws, resp, err := l.dialer.DialContext(ctx, wsBase(l.w.job.nodeURL(a))+"/v1/ws?token="+url.QueryEscape(a.Token), h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	now := time.Now()
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			l.w.rec.errCount.Add(1)
			l.w.rec.mu.Lock()
			l.w.rec.errors[errorStatus(resp.StatusCode)]++
			l.w.rec.mu.Unlock()
		} else {
			l.w.rec.fail(err)
		}
		return
	}
	l.w.rec.op(now, now.Sub(t0))
	c := &idleConn{ws: ws}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	label := a.User + "/" + a.Device
	l.readers.Go(func() {
		// Reading runs gorilla's ping handler (answering the server's pings) and notices
		// a connection the server closes.
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				if !l.closing.Load() {
					l.w.rec.count("dropped", 1)
					l.w.v.Reportf(VDropped, label, "", "connection closed by the server while idle: %v", err)
				}
				return
			}
		}
	})
}

// heartbeat pings the server on every connection once per Heartbeat, spread evenly.
func (l *idle) heartbeat(ctx context.Context) {
	frame := []byte(`{"id":"hb","op":"ping"}`)
	for ctx.Err() == nil && !l.closing.Load() {
		l.mu.Lock()
		conns := append([]*idleConn(nil), l.conns...)
		l.mu.Unlock()
		if len(conns) == 0 {
			return
		}
		gap := l.w.job.Heartbeat / time.Duration(len(conns))
		next := time.Now()
		for _, c := range conns {
			next = next.Add(gap)
			if !sleepUntil(ctx, next) || l.closing.Load() {
				return
			}
			c.writeMu.Lock()
			_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if c.ws.WriteMessage(websocket.TextMessage, frame) == nil {
				l.w.rec.count("heartbeats", 1)
			}
			c.writeMu.Unlock()
		}
	}
}

// drain holds the connections for hold, then closes them politely.
func (l *idle) drain(ctx context.Context, _ map[string]int64, hold time.Duration) {
	sleepUntil(ctx, time.Now().Add(hold))
	l.closing.Store(true)
	l.mu.Lock()
	conns := l.conns
	l.mu.Unlock()
	l.w.rec.count("held", int64(len(conns)))
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	for _, c := range conns {
		c.writeMu.Lock()
		_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		c.writeMu.Unlock()
		c.ws.Close()
	}
	l.readers.Wait()
}
