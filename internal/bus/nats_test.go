package bus_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
)

const natsStart = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"

// natsURL is the server the NATS tests use: $PARLEY_TEST_NATS_URL or the local default.
func natsURL() string {
	if u := os.Getenv("PARLEY_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// randomPrefix isolates one test's subjects from every other test on the same server.
func randomPrefix(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "test" + hex.EncodeToString(b[:])
}

// mustOpenNATS connects to url with opts, skipping the test when no server answers within a
// second.
func mustOpenNATS(t *testing.T, url string, opts bus.NATSOptions) *bus.NATS {
	t.Helper()
	opts.ConnectTimeout = time.Second
	b, err := bus.OpenNATS(url, opts)
	if err != nil {
		t.Skipf("NATS not reachable at %s (%v): start it with %s, or set PARLEY_TEST_NATS_URL", url, err, natsStart)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestNATS(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		return mustOpenNATS(t, natsURL(), bus.NATSOptions{Prefix: randomPrefix(t), Name: t.Name()})
	})
}

// TestNATSBetweenConnections checks what the bus is for: two nodes (two connections) with the
// same prefix see each other's messages; a node with another prefix does not.
func TestNATSBetweenConnections(t *testing.T) {
	prefix := randomPrefix(t)
	a := mustOpenNATS(t, natsURL(), bus.NATSOptions{Prefix: prefix})
	c := mustOpenNATS(t, natsURL(), bus.NATSOptions{Prefix: prefix})
	other := mustOpenNATS(t, natsURL(), bus.NATSOptions{Prefix: randomPrefix(t)})

	got := make(chan string, 10)
	leaked := make(chan string, 10)
	subscribe(t, c, bus.UserSubject("bob"), got)
	subscribe(t, other, bus.UserSubject("bob"), leaked)
	// A subscription is in effect on the server once a round trip after it completes; a
	// message the subscriber publishes to itself proves that.
	publishUntil(t, c, bus.UserSubject("bob"), "self", got)

	if err := a.Publish(context.Background(), bus.UserSubject("bob"), []byte("from a")); err != nil {
		t.Fatal(err)
	}
	waitMsg(t, got, "from a")
	select {
	case m := <-leaked:
		t.Errorf("a bus with another prefix received %q", m)
	default:
	}
}

// TestNATSDisconnect cuts the connection under a live bus: Healthy and Publish report
// ErrUnavailable while it is down, and after the server comes back the bus reconnects by itself
// and its subscriptions deliver again.
func TestNATSDisconnect(t *testing.T) {
	target := strings.TrimPrefix(natsURL(), "nats://")
	if strings.Contains(target, ",") || strings.Contains(target, "/") {
		t.Skip("PARLEY_TEST_NATS_URL is not a single host:port")
	}
	mustOpenNATS(t, natsURL(), bus.NATSOptions{}).Close() // skips if NATS is absent
	p := startProxy(t, target)
	b := mustOpenNATS(t, "nats://"+p.addr, bus.NATSOptions{Prefix: randomPrefix(t)})
	got := make(chan string, 100)
	subscribe(t, b, "t.reconnect", got)
	publishUntil(t, b, "t.reconnect", "before", got)
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy while connected: %v", err)
	}

	p.cut()
	waitErr(t, "Healthy", b.Healthy)
	if err := b.Publish(context.Background(), "t.reconnect", []byte("x")); !errors.Is(err, bus.ErrUnavailable) {
		t.Errorf("Publish while disconnected = %v, want ErrUnavailable", err)
	}

	p.restore(t)
	deadline := time.Now().Add(10 * time.Second)
	for b.Healthy() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection within 10s: %v", b.Healthy())
		}
		time.Sleep(20 * time.Millisecond) // polling a status, not synchronising goroutines
	}
	publishUntil(t, b, "t.reconnect", "after", got)
}

func subscribe(t *testing.T, b bus.Bus, subject string, ch chan string) {
	t.Helper()
	sub, err := b.Subscribe(subject, func(data []byte) {
		select {
		case ch <- string(data):
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// publishUntil publishes msg every 100ms until it arrives on ch, within 5 seconds.
func publishUntil(t *testing.T, b bus.Bus, subject, msg string, ch chan string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		_ = b.Publish(context.Background(), subject, []byte(msg))
		tick := time.After(100 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case m := <-ch:
				if m == msg {
					return
				}
			case <-tick:
				waiting = false
			case <-deadline:
				t.Fatalf("%q never arrived on %s", msg, subject)
			}
		}
	}
}

func waitMsg(t *testing.T, ch chan string, msg string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-ch:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("%q never arrived", msg)
		}
	}
}

// waitErr waits up to 5 seconds for check to report ErrUnavailable.
func waitErr(t *testing.T, name string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := check()
		if errors.Is(err, bus.ErrUnavailable) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after the cut, want ErrUnavailable", name, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a status, not synchronising goroutines
	}
}

// proxy forwards TCP connections to a NATS server; cut drops them all and refuses new ones
// until restore, which simulates losing the network to NATS.
type proxy struct {
	addr, target string

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), target: target}
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) serve(ln net.Listener) {
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

func (p *proxy) cut() {
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

func (p *proxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Skipf("cannot listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
