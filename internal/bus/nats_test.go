package bus_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
)

func TestNATS(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		return bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: bustest.RandomPrefix(t), Name: t.Name()})
	})
}

// TestNATSBetweenConnections checks what the bus is for: two nodes (two connections) with the
// same prefix see each other's messages; a node with another prefix does not.
func TestNATSBetweenConnections(t *testing.T) {
	prefix := bustest.RandomPrefix(t)
	a := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix})
	c := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix})
	other := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: bustest.RandomPrefix(t)})

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
	target := strings.TrimPrefix(bustest.NATSURL(), "nats://")
	if strings.Contains(target, ",") || strings.Contains(target, "/") {
		t.Skip("PARLEY_TEST_NATS_URL is not a single host:port")
	}
	bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{}).Close() // skips if NATS is absent
	p := bustest.StartProxy(t, target)
	b := bustest.OpenNATS(t, "nats://"+p.Addr, bus.NATSOptions{Prefix: bustest.RandomPrefix(t)})
	got := make(chan string, 100)
	subscribe(t, b, "t.reconnect", got)
	publishUntil(t, b, "t.reconnect", "before", got)
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy while connected: %v", err)
	}

	p.Cut()
	waitErr(t, "Healthy", b.Healthy)
	if err := b.Publish(context.Background(), "t.reconnect", []byte("x")); !errors.Is(err, bus.ErrUnavailable) {
		t.Errorf("Publish while disconnected = %v, want ErrUnavailable", err)
	}

	p.Restore(t)
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

// TestNATSSubscriptionsShareGoroutines: a node subscribes to one subject per user online,
// so a subscription must not cost a goroutine of its own (nats.go's callback subscriptions
// each start one); the bus's few workers deliver them all.
func TestNATSSubscriptionsShareGoroutines(t *testing.T) {
	b := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: bustest.RandomPrefix(t)})
	before := runtime.NumGoroutine()
	const n = 1000
	got := make(chan string, 1)
	for i := range n {
		subscribe(t, b, fmt.Sprintf("t.many.u%d", i), got)
	}
	if extra := runtime.NumGoroutine() - before; extra > n/10 {
		t.Fatalf("%d subscriptions started %d goroutines", n, extra)
	}
	publishUntil(t, b, fmt.Sprintf("t.many.u%d", n-1), "last", got)
}

// Publish hands its message to a goroutine that sends a burst at a time: the caller may
// reuse its buffer at once, and one publisher's messages still arrive in order.
func TestNATSPublishKeepsACopy(t *testing.T) {
	prefix := bustest.RandomPrefix(t)
	a := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix})
	c := bustest.OpenNATS(t, bustest.NATSURL(), bus.NATSOptions{Prefix: prefix})
	got := make(chan string, 200)
	subscribe(t, c, "t.copy", got)
	publishUntil(t, c, "t.copy", "self", got)

	buf := []byte("m-000")
	for i := range 100 {
		copy(buf, fmt.Sprintf("m-%03d", i))
		if err := a.Publish(context.Background(), "t.copy", buf); err != nil {
			t.Fatal(err)
		}
		copy(buf, "XXXXX") // what the bus sends must not change with the caller's buffer
	}
	for i := range 100 {
		waitMsg(t, got, fmt.Sprintf("m-%03d", i))
	}
}
