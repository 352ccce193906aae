package push

import (
	"net/http"
	"sync/atomic"
	"time"
)

// defaultTimeout bounds one request to a provider when the caller gave no client.
const defaultTimeout = 30 * time.Second

// DefaultConnections is how many connections a provider keeps to its service. One HTTP/2
// connection carries many requests at once, but each side reads and writes it on one
// goroutine: past a few thousand requests a second the connection, not the CPU, is the
// bound (BenchmarkOfflineFanout). Apple asks senders to open several connections for
// throughput, and FCM's HTTP v1 API spreads them the same way.
const DefaultConnections = 4

// Conns spreads requests over n connections: n clients with c's settings (timeout,
// TLS configuration, redirect policy) and a transport each, so that none shares another's
// connections. A nil c is a client with a 30-second timeout on http.DefaultTransport's
// settings; a c whose transport is not an *http.Transport is used alone.
type Conns struct {
	clients []*http.Client
	next    atomic.Uint64
}

// NewConns returns n clients made from c (n < 1 means DefaultConnections).
func NewConns(c *http.Client, n int) *Conns {
	if n < 1 {
		n = DefaultConnections
	}
	base := c
	if base == nil {
		base = &http.Client{Timeout: defaultTimeout}
	}
	tr, ok := base.Transport.(*http.Transport)
	if base.Transport == nil {
		tr, ok = http.DefaultTransport.(*http.Transport), true
	}
	if !ok {
		return &Conns{clients: []*http.Client{base}}
	}
	cs := &Conns{clients: make([]*http.Client, n)}
	for i := range cs.clients {
		cc := *base
		t := tr.Clone()
		// One connection each: without the bound, a burst that finds no connection yet
		// dials one per request (each a TLS handshake) before HTTP/2 multiplexes them.
		t.MaxConnsPerHost = 1
		cc.Transport = t
		cs.clients[i] = &cc
	}
	return cs
}

// Client returns the next client, in turn.
func (cs *Conns) Client() *http.Client {
	return cs.clients[cs.next.Add(1)%uint64(len(cs.clients))]
}
