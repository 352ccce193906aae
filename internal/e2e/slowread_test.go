package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/parleychat/parley/internal/parleytest"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/internal/server"
)

// bigPage fills a direct conversation with count messages of about 60 KB each and returns
// the path of a history page holding all of them (count × 60 KB of JSON: 12 MB for 200),
// and a token that may read it. The page is larger than the kernel buffers of both ends of
// a loopback connection (4 MiB at most for the server's send buffer on Linux), so a client
// that does not read makes the server's write block.
func bigPage(t *testing.T, n *node, count int) (path, token string) {
	t.Helper()
	token = n.user(t, "reader")
	n.user(t, "writer")
	convID := n.direct(t, token, "writer")["conv_id"].(string)
	text := strings.Repeat("x", 60000)
	for i := range count {
		n.ok(t, "POST", "/v1/messages", token, map[string]any{"conv_id": convID,
			"client_msg_id": fmt.Sprintf("big-%d", i), "content_type": 1, "content": map[string]any{"text": text}})
	}
	return fmt.Sprintf("/v1/conversations/%s/messages?limit=%d", convID, count), token
}

// dialTCP opens a raw TCP connection to the node, for tests that speak HTTP by hand.
func (n *node) dialTCP() (net.Conn, error) { return net.Dial("tcp", n.hostPort()) }

// hostPort is the node's address, as in a Host header.
func (n *node) hostPort() string { return strings.TrimPrefix(n.URL, "http://") }

// rawGet writes a GET request for path on conn, with a bearer token when it is not empty.
func rawGet(conn net.Conn, n *node, path, token string) error {
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n", path, n.hostPort())
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	_, err := io.WriteString(conn, req+"\r\n")
	return err
}

// pageDeadline bounds the wait for the answer to a request for bigPage's page: the server
// reads and encodes 12 MB first, which takes seconds under -race on a busy machine.
const pageDeadline = 3 * deadline

// slowReader is one connection of the slow-reader attack: it asked for a large page and,
// once the answer's headers arrived, reads nothing more until told to.
type slowReader struct {
	conn      net.Conn
	resp      *http.Response
	headers   chan error    // the answer's headers arrived (nil), or why not
	headersAt time.Time     // when they did
	release   chan struct{} // closed when the reader may use the connection again
	done      chan struct{} // closed when it has; got and err then say what it saw
	got       int64         // body bytes received
	err       error         // why the body ended early (nil: it was complete)
}

// startSlowReader dials with a small receive buffer, so that the client's kernel holds
// little of the answer, asks for path, reads the answer's headers and then stops reading.
func startSlowReader(t *testing.T, n *node, path, token string) *slowReader {
	t.Helper()
	conn, err := n.dialTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	s := &slowReader{conn: conn, headers: make(chan error, 1), release: make(chan struct{}), done: make(chan struct{})}
	if err := rawGet(conn, n, path, token); err != nil {
		t.Fatal(err)
	}
	go s.run(n, token)
	return s
}

// run reads the answer's headers, waits for release, then sends another request on the
// connection and reads the rest of the first answer. When the server has closed the
// connection, the request meets a closed socket, which resets the connection: the read
// ends with ECONNRESET once the bytes already received are consumed. (Reading on without
// the request would take minutes: the server's kernel still delivers what the server
// buffered before closing, a few KiB at a time into the small receive buffer.)
func (s *slowReader) run(n *node, token string) {
	defer close(s.done)
	_ = s.conn.SetReadDeadline(time.Now().Add(pageDeadline))
	s.resp, s.err = http.ReadResponse(bufio.NewReaderSize(s.conn, 4096), nil)
	s.headersAt = time.Now()
	s.headers <- s.err
	if s.err != nil {
		return
	}
	<-s.release
	_ = rawGet(s.conn, n, "/v1/me", token) // an error is a reset already, which the read sees
	_ = s.conn.SetReadDeadline(time.Now().Add(deadline))
	s.got, s.err = io.Copy(io.Discard, s.resp.Body)
}

// awaitHeaders waits for the answer's headers of every reader and returns when the last
// arrived. Each answer must be a 200 with a page of over 10 MiB.
func awaitHeaders(t *testing.T, readers []*slowReader) time.Time {
	t.Helper()
	var last time.Time
	for _, s := range readers {
		select {
		case err := <-s.headers:
			if err != nil {
				t.Fatalf("reading the answer's headers: %v", err)
			}
		case <-time.After(pageDeadline):
			t.Fatal("no answer headers")
		}
		if s.resp.StatusCode != http.StatusOK || s.resp.ContentLength < 10<<20 {
			t.Fatalf("answered %d with %d bytes, want 200 with a page over 10 MiB", s.resp.StatusCode, s.resp.ContentLength)
		}
		if s.headersAt.After(last) {
			last = s.headersAt
		}
	}
	return last
}

// TestAttackSlowReader: clients that ask for a 12 MB history page and never read it are cut
// by the server within the write timeout of the answer's start, which frees the handler
// and closes the connection (the client's socket is reset when it uses it again), while
// another user's sends stay fast. A client that reads the same page slowly but steadily,
// taking longer than the write timeout in all, gets all of it: the deadline bounds
// progress, not the whole answer.
func TestAttackSlowReader(t *testing.T) {
	parleytest.OneNode(t, "the balancer reads for a slow client, so the node never sees one")
	const writeTimeout = 2 * time.Second
	n := start(t, func(c *server.Config) { c.Gateway.WriteTimeout, c.Gateway.SendRate = writeTimeout, 0 })
	path, token := bigPage(t, n, 200)

	t.Run("never reads", func(t *testing.T) {
		by := newBystander(t, n, "by")
		base := by.baseline(t)
		const attackers = 2
		readers := make([]*slowReader, attackers)
		for i := range readers {
			readers[i] = startSlowReader(t, n, path, token)
		}
		began := awaitHeaders(t, readers)
		by.unaffected(t, fmt.Sprintf("%d slow readers", attackers), base)
		eventually(t, "the server to cut the unread answers", func() bool {
			return n.metric(t, "parley_http_responses_cut_total") == attackers
		})
		// The last answer's deadline was set just before its headers were sent.
		if cut := time.Since(began); cut < writeTimeout/2 || cut > writeTimeout+3*time.Second {
			t.Errorf("answers cut %v after the last one began, want the write timeout %v (+3 s)", cut, writeTimeout)
		}
		for _, s := range readers {
			close(s.release)
			<-s.done
			if !errors.Is(s.err, syscall.ECONNRESET) && !errors.Is(s.err, io.ErrUnexpectedEOF) {
				t.Errorf("the client read %d of %d bytes, then %v: want the connection closed by the server (reset, or cut short)",
					s.got, s.resp.ContentLength, s.err)
			}
		}
		n.ok(t, "GET", "/v1/me", token, nil) // the reader's next, new connection is served
	})

	t.Run("reads slowly but steadily", func(t *testing.T) {
		began := time.Now()
		got, err := steadyRead(n, path, token, 2<<20)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("after %d bytes in %v: %v", got, took, err)
		}
		if took < 2*writeTimeout {
			t.Fatalf("the page was read in %v, not slower than twice the write timeout %v: the test proves nothing", took, writeTimeout)
		}
		t.Logf("read %d bytes in %v", got, took)
	})
}

// steadyRead asks for path on a new connection and reads the answer at about perSecond
// bytes a second, in pieces every 10 ms. It returns the body bytes read, and an error if
// the answer was not a 200 or its body ended early.
func steadyRead(n *node, path, token string, perSecond int64) (int64, error) {
	conn, err := n.dialTCP()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := rawGet(conn, n, path, token); err != nil {
		return 0, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(6 * deadline))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("answered %d", resp.StatusCode)
	}
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	var got int64
	for range tick.C {
		m, err := io.CopyN(io.Discard, resp.Body, perSecond*int64(every)/int64(time.Second))
		got += m
		if err == io.EOF && got == resp.ContentLength {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// TestWriteDeadlineKeepAlive: on one keep-alive connection, a long-poll that waits longer
// than the write timeout still gets its answer (a deadline set for an earlier answer, or
// at the start of the request, would cut it), and so do the web client's page and a
// WebSocket upgrade made after it.
func TestWriteDeadlineKeepAlive(t *testing.T) {
	const writeTimeout = time.Second
	n := start(t, func(c *server.Config) { c.Gateway.WriteTimeout = writeTimeout })
	token := n.user(t, "poller")
	cursor := n.latest(t, token)
	conn, err := n.dialTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	get := func(path string) int {
		t.Helper()
		if err := rawGet(conn, n, path, token); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(deadline))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s on the reused connection: %v", path, err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("GET %s on the reused connection: body: %v", path, err)
		}
		return resp.StatusCode
	}
	if s := get("/v1/me"); s != http.StatusOK {
		t.Fatalf("GET /v1/me = %d", s)
	}
	began := time.Now()
	if s := get(fmt.Sprintf("/v1/sync?cursor=%d&wait=2", cursor)); s != http.StatusOK {
		t.Fatalf("long-poll = %d", s)
	}
	if waited := time.Since(began); waited < 2*writeTimeout {
		t.Fatalf("the long-poll answered after %v, before outwaiting the write timeout %v: the test proves nothing", waited, writeTimeout)
	}
	if s := get("/"); s != http.StatusOK {
		t.Fatalf("GET / after the long-poll = %d", s)
	}
	ws, _, err := (&websocket.Dialer{
		NetDial:          func(string, string) (net.Conn, error) { return conn, nil },
		HandshakeTimeout: deadline,
	}).Dial(n.wsURL(nil)+"?token="+token, nil)
	if err != nil {
		t.Fatalf("WebSocket upgrade on the reused connection: %v", err)
	}
	c := newWSClient(t, ws)
	if r := c.do("ping", nil); r["op"] != "pong" {
		t.Fatalf("ping answered %v", r)
	}
}
