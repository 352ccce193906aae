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

func TestDataDirectoryKeepsItsEngine(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if got := DetectEngine(cfg.Data); got != "" {
		t.Fatalf("new directory detected as %q", got)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := DetectEngine(cfg.Data); got != "sqlite" {
		t.Fatalf("detected %q, want sqlite", got)
	}
	cfg.Engine = "pebble"
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "holds a sqlite store") {
		t.Fatalf("opening a SQLite directory as pebble: %v", err)
	}
	other := DefaultConfig(t.TempDir())
	other.Engine = "leveldb"
	if _, err := New(context.Background(), other); err == nil || !strings.Contains(err.Error(), "unknown storage engine") {
		t.Fatalf("unknown engine: %v", err)
	}
}
