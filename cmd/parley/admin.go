package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// userCmd is `parley user add <id> [--name N]`: it creates a user directly in the data
// directory, with or without the server running.
func userCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "add" {
		return fmt.Errorf("usage: parley user add <user_id> [--name NAME] [--data DIR]")
	}
	fs := newFlagSet("user add", stderr)
	data := fs.String("data", "./data", "data directory")
	name := fs.String("name", "", "display name")
	engine := fs.String("store", "", "storage engine: pebble or sqlite for a new data directory (default: the directory's own, else pebble), or postgres")
	pgURL := fs.String("postgres-url", "", "PostgreSQL connection string, with --store postgres")
	if err := parseFlags(fs, reorder(args[1:]), getenv); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: parley user add <user_id> [--name NAME] [--data DIR]")
	}
	svc, done, err := openData(ctx, *data, *engine, *pgURL)
	if err != nil {
		return err
	}
	defer done()
	u, created, err := svc.CreateUser(ctx, fs.Arg(0), *name)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(stdout, "created user %s\n", u.UserID)
	} else {
		fmt.Fprintf(stdout, "user %s already exists\n", u.UserID)
	}
	return nil
}

// tokenCmd is `parley token <user> <device> [--ttl D]`: it mints a device token from the
// data directory without the server running, and prints it alone on stdout.
func tokenCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	data := fs.String("data", "./data", "data directory")
	ttl := fs.Duration("ttl", 0, "token lifetime (default 30 days)")
	engine := fs.String("store", "", "storage engine (default: the data directory's own), or postgres")
	pgURL := fs.String("postgres-url", "", "PostgreSQL connection string, with --store postgres")
	if err := parseFlags(fs, reorder(args), getenv); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: parley token <user_id> <device_id> [--ttl 720h] [--data DIR]")
	}
	svc, done, err := openData(ctx, *data, *engine, *pgURL)
	if err != nil {
		return err
	}
	defer done()
	tok, err := svc.IssueToken(ctx, fs.Arg(0), fs.Arg(1), *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok.Token)
	fmt.Fprintf(stderr, "expires %s\n", time.UnixMilli(tok.ExpiresAt).UTC().Format(time.RFC3339))
	return nil
}

// reorder moves positional arguments after the flags, so that `token alice phone --ttl 1h`
// works as well as `token --ttl 1h alice phone` (the flag package stops at the first
// positional argument).
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

// isBoolFlag: the operator commands have no boolean flags but -h/--help.
func isBoolFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" }
