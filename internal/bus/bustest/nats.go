package bustest

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
)

// NATSStart is the command that starts the local NATS server the tests expect.
const NATSStart = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"

// NATSURL is the server the NATS tests use: $PARLEY_TEST_NATS_URL or the local default.
func NATSURL() string {
	if u := os.Getenv("PARLEY_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// RandomPrefix isolates one test's subjects from every other test on the same server.
func RandomPrefix(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "test" + hex.EncodeToString(b[:])
}

// OpenNATS connects to url with opts and closes the bus when the test ends, skipping the
// test (naming the command that starts NATS) when no server answers within a second.
func OpenNATS(t testing.TB, url string, opts bus.NATSOptions) *bus.NATS {
	t.Helper()
	opts.ConnectTimeout = time.Second
	b, err := bus.OpenNATS(url, opts)
	if err != nil {
		t.Skipf("NATS not reachable at %s (%v): start it with %s, or set PARLEY_TEST_NATS_URL", url, err, NATSStart)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Proxy forwards TCP connections to a NATS server; Cut drops them all and refuses new ones
// until Restore, which simulates losing the network to NATS.
type Proxy struct {
	Addr   string // where it listens: dial nats://<Addr>
	target string

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns []net.Conn
}

// StartProxy forwards a loopback port to target (host:port) until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target}
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

// Cut closes every forwarded connection and stops listening.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore listens again on the same address, skipping the test if it cannot.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Skipf("cannot listen again on %s: %v", p.Addr, err)
	}
	p.serve(ln)
}
