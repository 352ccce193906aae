package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// stableConn is how long a connection must last for the reconnect backoff to start over: a
// server that accepts and immediately drops us must not be redialled in a tight loop.
const stableConn = 10 * time.Second

// Run keeps the session's WebSocket open until ctx ends, delivering every sync event to
// Options.OnEvent exactly once and in cursor order. After any drop it reconnects with
// exponential backoff and full jitter, resuming from the last cursor delivered.
//
// Run returns ctx's error when ctx ends, an error wrapping ErrReplaced when another connection
// of the same device took over (reconnecting would only evict it in turn), and an *Error with
// Code 401 (or 403) when the server refuses the token, e.g. after a revocation, or closes
// the connection because the token was revoked (4003) or expired (4004). A Client runs
// one session at a time (ErrRunning).
func (c *Client) Run(ctx context.Context) error { return c.run(ctx, nil) }

// background is a session started by Connect.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Connect starts the session in the background and returns once its first WebSocket is open.
// ctx bounds only that wait: the session then runs until Close, or until it fails (see Done
// and Err). If ctx ends first, or the session fails before connecting (a refused token, for
// one), the session is stopped and the error returned.
func (c *Client) Connect(ctx context.Context) error {
	c.bgMu.Lock()
	if c.bg != nil && !isClosed(c.bg.done) {
		c.bgMu.Unlock()
		return ErrRunning
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bg := &background{cancel: cancel, done: make(chan struct{})}
	c.bg = bg
	c.bgMu.Unlock()

	up := make(chan struct{})
	go func() {
		bg.err = c.run(runCtx, func() { close(up) })
		cancel()
		close(bg.done)
	}()
	select {
	case <-up:
		return nil
	case <-bg.done:
		return bg.err
	case <-ctx.Done():
		cancel()
		<-bg.done
		return ctx.Err()
	}
}

// Close stops the session started by Connect and waits for it to end: once Close returns,
// OnEvent is not called again. It returns the session's error if it had already failed
// (ErrReplaced, a 401), nil otherwise. It must not be called from OnEvent or OnReset.
func (c *Client) Close() error {
	c.bgMu.Lock()
	bg := c.bg
	c.bgMu.Unlock()
	if bg == nil {
		return nil
	}
	bg.cancel()
	<-bg.done
	if errors.Is(bg.err, context.Canceled) {
		return nil
	}
	return bg.err
}

// Done is closed when the session started by Connect has ended (nil before any Connect).
func (c *Client) Done() <-chan struct{} {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bg == nil {
		return nil
	}
	return c.bg.done
}

// Err returns why the session started by Connect ended, or nil while it runs.
func (c *Client) Err() error {
	c.bgMu.Lock()
	bg := c.bg
	c.bgMu.Unlock()
	if bg == nil || !isClosed(bg.done) {
		return nil
	}
	return bg.err
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// run is the session: a dispatcher delivering events, the AutoDelivered reporter, and the
// connect loop in this goroutine. connected, if non-nil, is called once the first WebSocket
// is open.
func (c *Client) run(ctx context.Context, connected func()) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var wg sync.WaitGroup
	wg.Go(func() { c.dispatch(ctx, cancel) })
	wg.Go(func() { c.runReadFanout(ctx) })
	if c.opts.AutoDelivered {
		wg.Go(func() { c.delivered.run(ctx, c) })
	}
	err := c.connectLoop(ctx, connected)
	cancel(err)
	wg.Wait()
	return err
}

// connectLoop dials, serves and redials until the session must stop.
func (c *Client) connectLoop(ctx context.Context, connected func()) error {
	c.deliverMu.Lock()
	needSnapshot := !c.haveCursor
	c.deliverMu.Unlock()
	attempt := 0
	pause := func() bool { // wait before the next try; false when ctx ended
		d := c.opts.Backoff.Delay(attempt)
		attempt++
		return sleepCtx(ctx, d)
	}
	for ctx.Err() == nil {
		if needSnapshot {
			if err := c.reset(ctx); err != nil {
				if fatalForSession(err) {
					return err
				}
				c.log.Warn("parley: snapshot failed", "err", err)
				pause()
				continue
			}
			needSnapshot = false
		}
		cn, err := c.dial(ctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case fatalForSession(err):
				return err
			case needsReset(err):
				needSnapshot = true
			default:
				c.log.Info("parley: connect failed", "err", err, "attempt", attempt)
			}
			pause()
			continue
		}
		opened := time.Now()
		c.conn.Store(cn) // before connected: a Send right after Connect uses the WebSocket
		if connected != nil {
			connected()
			connected = nil
		}
		end := cn.serve(ctx)
		c.conn.CompareAndSwap(cn, nil)
		switch end {
		case endReplaced:
			return fmt.Errorf("%w (close code %d)", ErrReplaced, closeReplaced)
		case endUnauthorized:
			return &Error{Code: http.StatusUnauthorized, Message: "session refused by the server"}
		case endReset:
			needSnapshot = true
		}
		lasted := time.Since(opened)
		if lasted >= stableConn {
			attempt = 0
		}
		c.log.Info("parley: connection ended, reconnecting", "lasted", lasted, "attempt", attempt)
		pause()
	}
	return context.Cause(ctx)
}

// dial opens a WebSocket resuming after the last delivered cursor and the latest mark (the
// server answers the mark with one changes frame after the event catch-up). The token goes in the
// Authorization header and, for servers behind proxies that strip it, in ?token= too.
func (c *Client) dial(ctx context.Context) (*wsConn, error) {
	q := url.Values{
		"cursor": {strconv.FormatInt(c.cursor.Load(), 10)},
		"mark":   {strconv.FormatInt(c.rooms.latestMark(), 10)},
		"token":  {c.opts.Token},
	}
	h := http.Header{"Authorization": {"Bearer " + c.opts.Token}}
	ws, resp, err := c.dialer.DialContext(ctx, c.wsURL+"?"+q.Encode(), h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, errorFromResponse(resp)
		}
		return nil, err
	}
	return newWSConn(c, ws), nil
}

// dropConn closes the open WebSocket, if any; the session reconnects from the last cursor
// delivered and the server replays what follows it.
func (c *Client) dropConn() {
	if cn := c.conn.Load(); cn != nil {
		cn.ws.Close()
	}
}

// sleepCtx waits d or until ctx ends, reporting whether the full wait happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
