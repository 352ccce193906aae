package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// slowResult is what a slow-body connection saw: the server's status line and headers, and
// how long after its headers were sent the server closed the connection.
type slowResult struct {
	name     string
	status   int
	close    bool // the answer said "Connection: close"
	closedIn time.Duration
	err      error
}

// slowBody performs the slow-body attack on one raw connection: it sends the headers of a
// request announcing a 1 KiB body, then trickles the body one byte per interval, and
// reads until the server closes the connection (or giveUp passes, an error).
func slowBody(n *node, name, method, path, token string, interval, giveUp time.Duration) slowResult {
	res := slowResult{name: name}
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
	if err != nil {
		res.err = err
		return res
	}
	defer conn.Close()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1024\r\n",
		method, path, strings.TrimPrefix(n.URL, "http://"))
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		res.err = err
		return res
	}
	sent := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go trickle(conn, interval, stop)
	_ = conn.SetReadDeadline(sent.Add(giveUp))
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		res.status, res.close = resp.StatusCode, resp.Close
	}
	_, err = io.Copy(io.Discard, br) // until the server closes (EOF, or a reset: unread bytes)
	res.closedIn = time.Since(sent)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		res.err = fmt.Errorf("connection still open after %v: %w", res.closedIn, err)
	}
	return res
}

// trickle writes one byte of body per interval until a write fails or stop is closed.
func trickle(conn net.Conn, interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	}
}

// TestAttackSlowBody: connections that send their headers and then trickle the body are
// answered and closed by the server within the body timeout (unauthenticated ones at once,
// before their body is read), while other users' sends stay fast.
func TestAttackSlowBody(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads a slow body before the node sees it")
	const bodyTimeout = 2 * time.Second
	n := start(t, func(c *server.Config) { c.Gateway.BodyTimeout = bodyTimeout })
	by := newBystander(t, n, "by")
	tok := n.user(t, "slow")
	base := by.baseline(t)

	type attack struct{ name, method, path, token string }
	attacks := []attack{
		{"send without token", "POST", "/v1/messages", ""},
		{"send with token", "POST", "/v1/messages", tok},
		{"admin without secret", "POST", "/v1/admin/users", ""},
		{"unknown route", "POST", "/v1/nothing", tok},
		{"page that reads no body", "GET", "/", ""},
	}
	const perAttack = 10 // 50 connections, as in the issue
	giveUp := bodyTimeout + 8*time.Second
	results := make(chan slowResult, perAttack*len(attacks))
	var wg sync.WaitGroup
	for _, a := range attacks {
		for range perAttack {
			wg.Go(func() { results <- slowBody(n, a.name, a.method, a.path, a.token, 50*time.Millisecond, giveUp) })
		}
	}
	by.unaffected(t, "50 slow bodies", base)
	wg.Wait()
	close(results)

	want := map[string]int{
		"send without token":      http.StatusUnauthorized,
		"send with token":         http.StatusRequestTimeout,
		"admin without secret":    http.StatusUnauthorized,
		"unknown route":           http.StatusNotFound,
		"page that reads no body": http.StatusOK,
	}
	for r := range results {
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", r.name, r.err)
		case r.status != want[r.name]:
			t.Errorf("%s: answered %d, want %d", r.name, r.status, want[r.name])
		case r.closedIn > bodyTimeout+3*time.Second:
			t.Errorf("%s: closed %v after the headers, want within the body timeout %v (+3 s)", r.name, r.closedIn, bodyTimeout)
		case r.status != http.StatusOK && !r.close:
			t.Errorf("%s: refused without Connection: close", r.name)
		case r.status == http.StatusUnauthorized && r.closedIn >= bodyTimeout:
			t.Errorf("%s: refused only after %v: the unauthenticated body was waited for", r.name, r.closedIn)
		}
	}
}

// TestAttackSlowBodyRateLimited: a device past its request limit is refused with 429 before
// its body is read, and its connection closed, however slowly the body trickles.
func TestAttackSlowBodyRateLimited(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads a slow body before the node sees it")
	const bodyTimeout = 5 * time.Second
	n := start(t, func(c *server.Config) {
		c.Gateway.BodyTimeout = bodyTimeout
		c.Gateway.RequestRate, c.Gateway.RequestBurst = 0.01, 1
	})
	tok := n.user(t, "greedy")
	n.ok(t, "GET", "/v1/conversations", tok, nil) // the one request of the burst
	r := slowBody(n, "rate-limited send", "POST", "/v1/messages", tok, 50*time.Millisecond, bodyTimeout+5*time.Second)
	switch {
	case r.err != nil:
		t.Fatal(r.err)
	case r.status != http.StatusTooManyRequests || !r.close:
		t.Fatalf("answered %d (Connection: close %v), want 429 with Connection: close", r.status, r.close)
	case r.closedIn >= bodyTimeout:
		t.Fatalf("closed only after %v: the rate-limited body was waited for", r.closedIn)
	}
}
