package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// envName is the environment variable that sets a flag: PARLEY_ plus the flag name in upper
// case with dashes as underscores (--admin-secret is PARLEY_ADMIN_SECRET).
func envName(flagName string) string {
	return "PARLEY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then fills every flag not given on the command line from
// its environment variable: flags win over the environment, which wins over defaults.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && !given[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
		}
	})
	return err
}

// newFlagSet returns a flag set whose usage lists the environment variable of every flag.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: parley %s [flags]\n\nflags (each also settable by its environment variable):\n", name)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(stderr, "  --%s (%s)\n    \t%s (default %q)\n", f.Name, envName(f.Name), f.Usage, f.DefValue)
		})
	}
	return fs
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
