package main

import (
	"io"
	"testing"

	"github.com/parleychat/parley/internal/bench"
)

// TestEveryScenarioParses keeps each scenario's defaults valid and its flags registered.
func TestEveryScenarioParses(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, s := range bench.Scenarios {
		if _, _, err := parseBench(s, nil, noEnv, io.Discard); err != nil {
			t.Errorf("%s with its defaults: %v", s, err)
		}
	}
}

// TestParleyFlag: --parley (or PARLEY_PARLEY) names the server binary; without it, and
// without --server, the bench needs a server it builds itself.
func TestParleyFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, parley, err := parseBench("direct", []string{"--parley", "/opt/parley"}, noEnv, io.Discard)
	if err != nil || parley != "/opt/parley" || !needsServer("direct", c) {
		t.Fatalf("--parley /opt/parley: got %q, needs server %v, err %v", parley, needsServer("direct", c), err)
	}
	env := func(k string) string {
		if k == "PARLEY_PARLEY" {
			return "/env/parley"
		}
		return ""
	}
	if _, parley, err := parseBench("group", nil, env, io.Discard); err != nil || parley != "/env/parley" {
		t.Fatalf("PARLEY_PARLEY: got %q, err %v", parley, err)
	}
	c, _, err = parseBench("direct", []string{"--server", "http://127.0.0.1:1", "--admin-secret", "0123456789abcdef0123456789abcdef"}, noEnv, io.Discard)
	if err != nil || needsServer("direct", c) {
		t.Fatalf("--server given: needs server %v, err %v", needsServer("direct", c), err)
	}
	c, _, _ = parseBench("echo", nil, noEnv, io.Discard)
	if needsServer("echo", c) {
		t.Fatal("echo needs no parley server")
	}
	if _, _, err := parseBench("echo", []string{"--parley", "x"}, noEnv, io.Discard); err == nil {
		t.Fatal("echo accepted --parley, which it does not use")
	}
}
