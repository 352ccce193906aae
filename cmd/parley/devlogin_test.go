package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeDevLoginNeedsLoopback: --dev-login (or PARLEY_DEV_LOGIN) is refused, before the
// data directory is touched, unless --addr is a loopback address.
func TestServeDevLoginNeedsLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		env  map[string]string
		args []string
	}{
		{addr: "0.0.0.0:0", args: []string{"--dev-login"}},
		{addr: ":0", args: []string{"--dev-login"}},
		{addr: "[::]:0", args: []string{"--dev-login"}},
		{addr: "192.0.2.1:0", args: []string{"--dev-login"}},
		{addr: "example.com:0", args: []string{"--dev-login"}},
		{addr: ":0", env: map[string]string{"PARLEY_DEV_LOGIN": "true"}},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"serve", "--addr", tc.addr, "--data", dir, "--admin-secret", testSecret}, tc.args...)
		_, _, err := runCmd(t, env(tc.env), args...)
		if err == nil || !strings.Contains(err.Error(), "--dev-login") || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("serve --addr %s %v (env %v): error %v, want a refusal naming --dev-login and loopback", tc.addr, tc.args, tc.env, err)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.9.9.9:1": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestServeDevLogin: with the flag on a loopback address the endpoint signs in; without it
// the endpoint does not exist. The page is served either way.
func TestServeDevLogin(t *testing.T) {
	on := runServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"), "--admin-secret", testSecret, "--dev-login")
	resp, err := http.Post(on.URL+"/v1/dev/login", "application/json", strings.NewReader(`{"user_id":"alice","device_id":"web"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("dev login with --dev-login: %d, want 200", resp.StatusCode)
	}

	off := runServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"), "--admin-secret", testSecret)
	for path, want := range map[string]int{"/v1/dev/login": 404, "/": 200} {
		resp, err := http.Get(off.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without --dev-login: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
