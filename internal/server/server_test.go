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
