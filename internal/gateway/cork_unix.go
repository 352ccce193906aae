//go:build unix

package gateway

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawConnOf returns c's syscall.RawConn, or nil if it has none (a TLS connection, a pipe).
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// fill waits until data has arrived, holding no buffer, then reads it into c.rbuf, a buffer
// from readBuffers. Like net.Conn's Read, it honours the read deadline and returns io.EOF
// once the peer has closed.
func (c *corkConn) fill() error {
	if c.readRaw == nil {
		c.readRaw = c.readRawOnce
	}
	c.rerr = nil
	if err := c.raw.Read(c.readRaw); err != nil {
		return err
	}
	return c.rerr
}

// readRawOnce is fill's function for raw.Read: it reads what has arrived on fd into a pooled
// buffer, or, when nothing has, puts the buffer back and reports false, so that raw.Read
// waits for data before calling it again.
func (c *corkConn) readRawOnce(fd uintptr) bool {
	b := readBuffers.Get().(*[]byte)
	var n int
	var err error
	for {
		n, err = syscall.Read(int(fd), (*b)[:cap(*b)])
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.EAGAIN:
		readBuffers.Put(b)
		return false
	case err != nil:
		readBuffers.Put(b)
		c.rerr = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n == 0:
		readBuffers.Put(b)
		c.rerr = io.EOF
	default:
		*b = (*b)[:n]
		c.rbuf = b
	}
	return true
}
