package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
)

// busCmd is `parley bus rotate-key`: it adds a new cluster key to the store the nodes
// share. The running nodes start sealing with it within their keyring reload (30 s) and
// open it at once (an unknown key id makes a node read the keyring); the key two
// rotations old is retired, since the nodes accept the two newest (docs/deployment.md,
// "Trust model").
func busCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "usage: parley bus rotate-key [--store postgres --postgres-url URL | --data DIR]"
	if len(args) == 0 || args[0] != "rotate-key" {
		return errors.New(use)
	}
	fs := newFlagSet("bus rotate-key", stderr)
	data := fs.String("data", "./data", "data directory")
	engine := fs.String("store", "", "storage engine (default: the data directory's own), or postgres")
	pgURL := fs.String("postgres-url", "", "PostgreSQL connection string, with --store postgres")
	if err := parseFlags(fs, reorder(args[1:]), getenv); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(use)
	}
	st, _, done, err := openStoreOnly(ctx, *data, *engine, *pgURL)
	if err != nil {
		return err
	}
	defer done()
	k, err := store.RotateBusKey(ctx, st, time.Now().UnixMilli(), server.NewBusSecret)
	if err != nil {
		return err
	}
	if k.ID == 1 {
		fmt.Fprintln(stdout, "added bus key 1, the first")
		return nil
	}
	fmt.Fprintf(stdout, "added bus key %d; nodes seal with it within 30s, and accept keys %d and %d\n", k.ID, k.ID-1, k.ID)
	return nil
}
