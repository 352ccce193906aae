package bus

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
)

// A publish Publish accepted that nats.go then refuses, the connection having gone in
// between, is told to OnLost.
func TestNATSQueuedPublishLostIsCounted(t *testing.T) {
	url := os.Getenv("PARLEY_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	var lost atomic.Int64
	b, err := OpenNATS(url, NATSOptions{Prefix: "lostcount", OnLost: func() { lost.Add(1) }})
	if err != nil {
		t.Skipf("no NATS server at %s (start one with: nats-server -js): %v", url, err)
	}
	defer b.Close()
	b.sendMu.Lock() // hold the publishing goroutine off while the connection goes
	for range 3 {
		if err := b.Publish(context.Background(), "t.lost", []byte("x")); err != nil {
			b.sendMu.Unlock()
			t.Fatal(err)
		}
	}
	b.nc.Close()
	b.sendMu.Unlock()
	b.send() // whatever the goroutine has not sent yet
	if n := lost.Load(); n != 3 {
		t.Fatalf("lost %d publishes, want 3", n)
	}
}
