package gateway

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestIdleWebSocketFootprint holds idleConns authenticated WebSockets open and measures what
// the server keeps for each: one goroutine (the reader; the writer runs only while it has
// something to write), and little heap. It does so again after every connection has been
// answered a frame, which must leave nothing behind (no writer, no queue). The clients are
// bare sockets, so that their own memory stays small (a few hundred bytes each, counted in).
//
// The bounds guard what the idle-connection work removed: a second goroutine (the writer,
// parked), and the 896-byte reply channel, the 2.3 KiB hub channel and the 1 KiB read buffer
// that every connection held. Measured here before that work: 2 goroutines and 8.7 KiB of
// heap per connection; after: 1 and 3.0 KiB (the client's socket, about 450 bytes,
// included), 3.3 KiB under the race detector, whose stacks are larger too.
func TestIdleWebSocketFootprint(t *testing.T) {
	const (
		idleConns       = 200
		maxHeapPerConn  = 3840 // bytes: the 1 KiB read buffer back would pass it
		devicesPerUser  = 10
		maxExtraRunning = 8 // goroutines that may come and go meanwhile (timers, the runtime's)
	)
	ts := newTestServer(t, func(c *Config) { c.SendRate, c.RequestRate, c.FanoutRate = 0, 0, 0 })
	tokens := make([]string, idleConns)
	for i := range tokens {
		user := fmt.Sprintf("idle%d", i/devicesPerUser)
		if i%devicesPerUser == 0 {
			ts.user(user, "d0")
		}
		tokens[i] = ts.token(user, fmt.Sprintf("d%d", i%devicesPerUser))
	}
	goroutines0, heap0, stack0 := footprint()

	conns := make([]net.Conn, idleConns)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	for i, tok := range tokens {
		conns[i] = ts.dialBare(tok)
	}
	waitFor(t, func() bool { return testutilGauge(ts, "parley_ws_connections") == idleConns })
	check := func(when string) {
		t.Helper()
		var goroutines int
		var heap, stack float64
		deadline := time.Now().Add(5 * time.Second)
		for { // until the writers and timer goroutines of the setup have ended
			goroutines, heap, stack = footprint()
			if goroutines-goroutines0 <= idleConns || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		perConn := (heap - heap0) / idleConns
		t.Logf("%s: %.2f goroutines, %.0f bytes of heap and %.0f of stack per idle connection",
			when, float64(goroutines-goroutines0)/idleConns, perConn, (stack-stack0)/idleConns)
		if goroutines-goroutines0 > idleConns+maxExtraRunning {
			t.Errorf("%s: %d goroutines for %d idle connections, want one each", when, goroutines-goroutines0, idleConns)
		}
		if perConn > maxHeapPerConn {
			t.Errorf("%s: %.0f bytes of heap per idle connection, want at most %d", when, perConn, maxHeapPerConn)
		}
	}
	check("open")

	// Every connection is answered a frame: its writer runs, then ends, and its queues go.
	ping := maskedText(`{"id":"p","op":"ping"}`)
	for _, c := range conns {
		if _, err := c.Write(ping); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		readBareFrame(t, c)
	}
	check("answered")
}

// footprint returns the goroutines, and the bytes of heap and of goroutine stacks in use,
// after collecting garbage.
func footprint() (goroutines int, heap, stack float64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), float64(m.HeapAlloc), float64(m.StackInuse)
}

// dialBare opens a WebSocket with token and returns its bare socket, with nothing of the
// client library's kept. The caller closes it.
func (ts *testServer) dialBare(token string) net.Conn {
	ts.t.Helper()
	d := websocket.Dialer{ReadBufferSize: 128, WriteBufferSize: 128}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/ws?token="+token, nil)
	if err != nil {
		ts.t.Fatalf("dial: %v", err)
	}
	return ws.UnderlyingConn()
}

// maskedText is a client's text frame of payload (shorter than 126 bytes) with a zero mask.
func maskedText(payload string) []byte {
	return append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

// readBareFrame reads one short unmasked server frame from c.
func readBareFrame(t testing.TB, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [2]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("read a frame: %v", err)
	}
	if h[1] >= 126 {
		t.Fatalf("frame header %x: not a short frame", h)
	}
	b := make([]byte, h[1])
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read a frame: %v", err)
	}
	return b
}
