package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/parleychat/parley/internal/cliflag"
)

// parseFlags parses args into fs, then fills the flags not given from the environment.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	return cliflag.Parse(fs, args, getenv)
}

// newFlagSet returns the flag set of `parley <name>`.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	return cliflag.NewFlagSet("parley "+name, stderr)
}

// newLogger returns the structured logger asked for by --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
}
