package gateway

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
)

// batchConn is the network connection under a WebSocket, which can hold writes back: while
// held, the frames gorilla writes (each whole, under gorilla's own write lock) collect in a
// buffer, and release sends them in one write. The writer holds it while it pushes a page
// of a catch-up, so that a page of 1,000 events costs the server a few system calls instead
// of 1,000, and the client a few reads and wake-ups instead of 1,000.
//
// Only the writer holds and releases, and only around writes it is making, so that nothing
// written meanwhile by another goroutine (gorilla's pong and close answers, from the reader)
// waits longer than a page takes to encode.
type batchConn struct {
	net.Conn

	mu   sync.Mutex // guards buf and held; taken by every Write
	buf  *[]byte    // from batchBuffers while held
	held bool
}

// maxBatch is the most a held batchConn buffers before it writes: enough for a page of small
// events to go out in a few writes, small enough for a socket buffer to take at once.
const maxBatch = 64 << 10

// batchBuffers recycles the buffers of held connections: a connection keeps none while it is
// not catching up.
var batchBuffers = sync.Pool{New: func() any { b := make([]byte, 0, maxBatch); return &b }}

// Write implements net.Conn: it writes p, or buffers it while the connection is held.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		return b.Conn.Write(p)
	}
	if len(*b.buf)+len(p) > maxBatch {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > maxBatch {
			return b.Conn.Write(p)
		}
	}
	*b.buf = append(*b.buf, p...)
	return len(p), nil
}

// hold starts buffering writes.
func (b *batchConn) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		b.held, b.buf = true, batchBuffers.Get().(*[]byte)
	}
}

// release writes what was buffered, under the write deadline of the last frame written
// (gorilla sets it before each), and stops buffering.
func (b *batchConn) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		return nil
	}
	err := b.flushLocked()
	*b.buf = (*b.buf)[:0]
	batchBuffers.Put(b.buf)
	b.held, b.buf = false, nil
	return err
}

func (b *batchConn) flushLocked() error {
	if len(*b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(*b.buf)
	*b.buf = (*b.buf)[:0]
	return err
}

// batchWriter hands the WebSocket upgrade a batchConn around the hijacked connection.
type batchWriter struct {
	http.ResponseWriter
	conn *batchConn // set by a successful Hijack
}

// Hijack implements http.Hijacker.
func (w *batchWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("gateway: response writer cannot hijack")
	}
	c, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &batchConn{Conn: c}
	return w.conn, rw, nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *batchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
