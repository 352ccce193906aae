// Command parley is the Parley instant-messaging server and its operator tools.
//
//	parley serve [flags]            run the server on the embedded store
//	parley user add <id> [--name]   create a user in the data directory
//	parley token <user> <device>    mint a device token from the data directory
//	parley version                  print the version
//
// The load tool is a command of its own, parley-bench, so that this binary is only the server.
//
// Every serve flag can also be set by an environment variable: --admin-secret is
// PARLEY_ADMIN_SECRET, --addr is PARLEY_ADDR, and so on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // --help was asked for and printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "parley:", err)
		os.Exit(1)
	}
}

const usage = `usage: parley <command> [flags]

commands:
  serve                   run the server (parley serve --help for flags)
  user add <id> [--name]  create a user in the data directory
  token <user> <device>   mint a device token from the data directory
  push test <user>        send a test notification to each of a user's devices, print the answers
  bus rotate-key          add a new cluster key for the bus's sealed messages (kept in the store)
  version                 print the version
`

// run is the whole program; tests call it with their own arguments and environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, getenv, stdout, stderr)
	case "user":
		return userCmd(ctx, rest, getenv, stdout, stderr)
	case "token":
		return tokenCmd(ctx, rest, getenv, stdout, stderr)
	case "bench":
		return errors.New("the load tool is its own command: parley-bench (go run ./cmd/parley-bench --help)")
	case "push":
		return pushCmd(ctx, rest, getenv, stdout, stderr)
	case "bus":
		return busCmd(ctx, rest, getenv, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "parley", version)
		return nil
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
