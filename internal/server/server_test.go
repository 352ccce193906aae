package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestOneServerPerDataDirectory(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on the same directory: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}

// TestDataDirectoryKeepsItsEngine: a new directory gets DefaultEngine (Pebble) unless --store
// names another; a directory keeps the engine that created it when none is named, which is
// how a SQLite installation from before Pebble was the default keeps working; naming the
// other engine is refused rather than opening a second, empty store.
func TestDataDirectoryKeepsItsEngine(t *testing.T) {
	for _, tc := range []struct {
		name, create, want, other string
	}{
		{name: "new directory", create: "", want: "pebble", other: "sqlite"},
		{name: "named pebble", create: "pebble", want: "pebble", other: "sqlite"},
		{name: "named sqlite", create: "sqlite", want: "sqlite", other: "pebble"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(t.TempDir())
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			if got := DetectEngine(cfg.Data); got != "" {
				t.Fatalf("new directory detected as %q", got)
			}
			cfg.Engine = tc.create
			if got := EngineOf(cfg); got != tc.want {
				t.Fatalf("EngineOf a new directory with engine %q: %q, want %q", tc.create, got, tc.want)
			}
			s, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			if got := DetectEngine(cfg.Data); got != tc.want {
				t.Fatalf("detected %q, want %s", got, tc.want)
			}
			// Restarted without --store (as after an upgrade): the directory's own engine.
			cfg.Engine = ""
			if got := EngineOf(cfg); got != tc.want {
				t.Fatalf("EngineOf the %s directory: %q", tc.want, got)
			}
			again, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatalf("reopen without --store: %v", err)
			}
			again.Close()
			cfg.Engine = tc.other
			if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "holds a "+tc.want+" store") {
				t.Fatalf("opening a %s directory as %s: %v", tc.want, tc.other, err)
			}
		})
	}
	other := DefaultConfig(t.TempDir())
	other.Engine = "leveldb"
	if _, err := New(context.Background(), other); err == nil || !strings.Contains(err.Error(), "unknown storage engine") {
		t.Fatalf("unknown engine: %v", err)
	}
}

// TestBadBusRefused: a --bus that is not a NATS URL, or a NATS that does not answer, stops
// the node at start, and leaves the data directory free for the next start.
func TestBadBusRefused(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, url := range []string{"http://127.0.0.1:4222", "nats://127.0.0.1:1"} {
		cfg.BusURL = url
		if s, err := New(context.Background(), cfg); err == nil {
			s.Close()
			t.Fatalf("bus %q: the node started", url)
		}
	}
	cfg.BusURL = ""
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after refused buses: %v", err)
	}
	s.Close()
}
