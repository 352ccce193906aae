package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store"
)

// `parley bus rotate-key` adds the next cluster key to the store, the first one included.
func TestBusRotateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, want := range []string{"added bus key 1, the first\n", "added bus key 2; nodes seal with it within 30s, and accept keys 1 and 2\n"} {
		out, stderr, err := runCmd(t, nil, "bus", "rotate-key", "--data", dir)
		if err != nil || out != want {
			t.Fatalf("bus rotate-key: %q, %v (stderr %s); want %q", out, err, stderr, want)
		}
	}
	st, err := server.OpenStore(context.Background(), server.DefaultConfig(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keys []store.BusKey
	if err := st.View(context.Background(), func(tx store.ReadTx) (err error) { keys, err = tx.BusKeys(context.Background()); return err }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != 1 || keys[1].ID != 2 || string(keys[0].Secret) == string(keys[1].Secret) || len(keys[1].Secret) != 32 {
		t.Fatalf("stored keys %v", keys)
	}
	if _, _, err := runCmd(t, nil, "bus", "rotate"); err == nil {
		t.Error("bus rotate (no such subcommand) succeeded")
	}
}

// --bus-seal=false turns sealing off; it is on by default (checked with the defaults).
func TestParseBusSeal(t *testing.T) {
	c, err := parseServe([]string{"--bus-seal=false"}, env(nil), nil)
	if err != nil || !c.Node.BusNoSeal {
		t.Fatalf("--bus-seal=false: BusNoSeal %v, %v", c.Node.BusNoSeal, err)
	}
	c, err = parseServe(nil, env(map[string]string{"PARLEY_BUS_SEAL": "false"}), nil)
	if err != nil || !c.Node.BusNoSeal {
		t.Fatalf("PARLEY_BUS_SEAL=false: BusNoSeal %v, %v", c.Node.BusNoSeal, err)
	}
}
