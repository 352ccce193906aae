package gateway

import (
	"net"
	"sync"
)

// corkConn is the network connection under a WebSocket: while held, the frames written to it
// collect in memory, and flush sends them with one write. The connection's writer holds it
// while it writes every frame that is already waiting (a reply and the event of the same
// send, or a burst of a busy group's events), so that they cost one system call instead of
// one each. Unheld, a write goes straight through, as for any other connection.
type corkConn struct {
	net.Conn
	mu   sync.Mutex
	held bool
	buf  []byte
}

// maxCorked bounds what a held connection collects: past it, the frames go out at once
// (a catch-up writes megabytes).
const maxCorked = 64 << 10

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= maxCorked {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// hold makes later writes collect until flush.
func (c *corkConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// flush sends what was collected and stops holding.
func (c *corkConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxCorked {
		c.buf = nil // do not keep a large buffer for an idle connection
	} else {
		c.buf = c.buf[:0]
	}
	return err
}
