package bus_test

import (
	"context"
	"testing"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
)

func TestMemory(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus { return bus.NewMemory(bus.MemoryOptions{}) })
}

// TestMemoryDropsOldest checks the documented overflow rule: a full queue drops its oldest
// message and counts it, so the newest wake-up is delivered.
func TestMemoryDropsOldest(t *testing.T) {
	m := bus.NewMemory(bus.MemoryOptions{QueueLen: 2})
	t.Cleanup(func() { _ = m.Close() })
	release := make(chan struct{})
	got := make(chan string, 10)
	sub, err := m.Subscribe("t.drop", func(data []byte) {
		got <- string(data)
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := context.Background()
	_ = m.Publish(ctx, "t.drop", []byte("0"))
	if first := <-got; first != "0" { // the handler now holds "0"; the queue is empty
		t.Fatalf("first = %q", first)
	}
	for _, s := range []string{"1", "2", "3", "4"} {
		if err := m.Publish(ctx, "t.drop", []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for _, want := range []string{"3", "4"} {
		if s := <-got; s != want {
			t.Errorf("got %q, want %q (oldest dropped)", s, want)
		}
	}
	if d := m.Dropped(); d != 2 {
		t.Errorf("Dropped() = %d, want 2", d)
	}
}

func TestToken(t *testing.T) {
	tests := []struct{ id, want string }{
		{"alice", "alice"},
		{"a-1", "a-1"},
		{"a.b@c", "a_2Eb_40c"},
		{"a_b", "a_5Fb"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := bus.Token(tt.id); got != tt.want {
				t.Errorf("Token(%q) = %q, want %q", tt.id, got, tt.want)
			}
			if tt.id != "" {
				if err := bus.ValidateSubject(bus.UserSubject(tt.id)); err != nil {
					t.Errorf("UserSubject(%q): %v", tt.id, err)
				}
			}
		})
	}
}
