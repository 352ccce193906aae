//go:build !unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// rawConnOf returns nil: reads go straight through to the connection here.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

// fill is not called without a RawConn.
func (c *corkConn) fill() error { return errors.New("gateway: no raw reads on this platform") }
