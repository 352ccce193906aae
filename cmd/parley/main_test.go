package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/push/webpush"
	"github.com/parleychat/parley/internal/server"
)

// testSecret is an admin secret long enough for serve (32 bytes or more).
const testSecret = "test-admin-secret-0123456789abcdef"

// env returns a getenv over a fixed map, so tests never read the real environment.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// runCmd runs the program in-process with args (without "parley") and returns its output.
func runCmd(t *testing.T, getenv func(string) string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if getenv == nil {
		getenv = env(nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	err = run(ctx, append([]string{"parley"}, args...), getenv, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestRunCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    string // "" means success
		wantStdout string // a substring of stdout
		wantStderr string // a substring of stderr
	}{
		{name: "version", args: []string{"version"}, wantStdout: "parley " + version + "\n"},
		{name: "--version", args: []string{"--version"}, wantStdout: "parley " + version + "\n"},
		{name: "help", args: []string{"help"}, wantStdout: "usage: parley <command>"},
		{name: "no command", args: nil, wantErr: "no command given", wantStderr: "usage: parley <command>"},
		{name: "unknown command", args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate"`, wantStderr: "usage: parley <command>"},
		{name: "user without add", args: []string{"user", "remove", "x"}, wantErr: "usage: parley user add"},
		{name: "user add without id", args: []string{"user", "add", "--data", "DATA"}, wantErr: "usage: parley user add"},
		{name: "token without device", args: []string{"token", "alice", "--data", "DATA"}, wantErr: "usage: parley token"},
		{name: "serve with an argument", args: []string{"serve", "--data", "DATA", "extra"}, wantErr: "serve takes no arguments"},
		{name: "serve unknown flag", args: []string{"serve", "--data", "DATA", "--no-such-flag"}, wantErr: "flag provided but not defined"},
		{name: "serve --help", args: []string{"serve", "--help"}, wantErr: flag.ErrHelp.Error(), wantStderr: "PARLEY_ADMIN_SECRET"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "DATA", dir)
			}
			stdout, stderr, err := runCmd(t, nil, args...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("run %q: %v\nstderr: %s", args, err, stderr)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("run %q: error %v, want one containing %q", args, err, tc.wantErr)
			}
			if !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tc.wantStdout)
			}
			if !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.wantStderr)
			}
			if _, err := os.Stat(dir); tc.wantErr != "" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused command touched the data directory (stat: %v)", err)
			}
		})
	}
}

func TestParseServeFlagsAndEnv(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c serveConfig)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c serveConfig) {
				if c.Addr != "127.0.0.1:8080" || c.Node.Data != "./data" || c.Node.AdminSecret != "" || c.Node.Relaxed || c.Node.BusNoSeal {
					t.Errorf("defaults: %+v", c)
				}
				if c.Node.Gateway.HeartbeatInterval != 30*time.Second || c.Node.Gateway.IdleTimeout != 75*time.Second {
					t.Errorf("heartbeat defaults: %v / %v", c.Node.Gateway.HeartbeatInterval, c.Node.Gateway.IdleTimeout)
				}
			},
		},
		{
			name: "flags",
			args: []string{"--addr", "127.0.0.1:0", "--data", "/tmp/x", "--admin-secret", "s3-0123456789abcdef0123456789abcdef", "--relaxed-durability",
				"--heartbeat", "2s", "--idle-timeout", "5s", "--send-rate", "0", "--request-rate", "0", "--recall-window", "1m",
				"--max-group-members", "10", "--log-level", "debug", "--log-format", "json"},
			check: func(t *testing.T, c serveConfig) {
				n := c.Node
				if c.Addr != "127.0.0.1:0" || n.Data != "/tmp/x" || n.AdminSecret != "s3-0123456789abcdef0123456789abcdef" || !n.Relaxed ||
					n.Gateway.HeartbeatInterval != 2*time.Second || n.Gateway.IdleTimeout != 5*time.Second ||
					n.Gateway.SendRate != 0 || n.Gateway.RequestRate != 0 || n.Chat.RecallWindow != time.Minute ||
					n.Chat.MaxGroupMembers != 10 || c.LogLevel != "debug" || c.LogFormat != "json" {
					t.Errorf("flags not applied: %+v", c)
				}
			},
		},
		{
			name: "push registration flags",
			args: []string{"--apns-topic", "com.example.chat", "--webpush-hosts", " push.example.com:8443, *.push.example.net ,", "--push-max-devices", "3"},
			check: func(t *testing.T, c serveConfig) {
				p := c.Node.Push
				if p.APNsTopic != "com.example.chat" || !slices.Equal(p.WebPushHosts, []string{"push.example.com:8443", "*.push.example.net"}) ||
					c.Node.Chat.MaxPushDevices != 3 {
					t.Errorf("push flags not applied: topic %q, hosts %q, max devices %d", p.APNsTopic, p.WebPushHosts, c.Node.Chat.MaxPushDevices)
				}
			},
		},
		{
			name: "push registration defaults",
			check: func(t *testing.T, c serveConfig) {
				if !slices.Equal(c.Node.Push.WebPushHosts, webpush.DefaultHosts) || c.Node.Chat.MaxPushDevices != 20 {
					t.Errorf("push defaults: hosts %q, max devices %d", c.Node.Push.WebPushHosts, c.Node.Chat.MaxPushDevices)
				}
			},
		},
		{
			name: "env fills unset flags",
			env: map[string]string{"PARLEY_ADDR": "127.0.0.1:9999", "PARLEY_DATA": "/tmp/envdata",
				"PARLEY_ADMIN_SECRET": "env-secret-0123456789abcdef0123456789", "PARLEY_RELAXED_DURABILITY": "true", "PARLEY_HEARTBEAT": "3s",
				"PARLEY_IDLE_TIMEOUT": "9s", "PARLEY_SEND_RATE": "7.5", "PARLEY_SEND_BURST": "3", "PARLEY_LOG_FORMAT": "json"},
			check: func(t *testing.T, c serveConfig) {
				n := c.Node
				if c.Addr != "127.0.0.1:9999" || n.Data != "/tmp/envdata" || n.AdminSecret != "env-secret-0123456789abcdef0123456789" || !n.Relaxed ||
					n.Gateway.HeartbeatInterval != 3*time.Second || n.Gateway.IdleTimeout != 9*time.Second ||
					n.Gateway.SendRate != 7.5 || n.Gateway.SendBurst != 3 || c.LogFormat != "json" {
					t.Errorf("environment not applied: %+v", c)
				}
			},
		},
		{
			name: "flag beats env, even when the flag is the zero value",
			args: []string{"--addr", "127.0.0.1:0", "--admin-secret", "flag-secret-0123456789abcdef012345678", "--send-rate", "0", "--heartbeat", "1s"},
			env: map[string]string{"PARLEY_ADDR": "127.0.0.1:9999", "PARLEY_ADMIN_SECRET": "env-secret-0123456789abcdef0123456789",
				"PARLEY_SEND_RATE": "50", "PARLEY_HEARTBEAT": "20s", "PARLEY_IDLE_TIMEOUT": "40s"},
			check: func(t *testing.T, c serveConfig) {
				n := c.Node
				if c.Addr != "127.0.0.1:0" || n.AdminSecret != "flag-secret-0123456789abcdef012345678" || n.Gateway.SendRate != 0 ||
					n.Gateway.HeartbeatInterval != time.Second {
					t.Errorf("a flag lost to the environment: %+v", c)
				}
				if n.Gateway.IdleTimeout != 40*time.Second {
					t.Errorf("idle timeout %v, want 40s from PARLEY_IDLE_TIMEOUT", n.Gateway.IdleTimeout)
				}
			},
		},
		{
			name: "hardening flags",
			args: []string{"--debug-addr", "0.0.0.0:6060", "--debug-addr-public", "--longpolls-per-user", "3", "--body-timeout", "2s",
				"--write-timeout", "3s", "--admin-secret", strings.Repeat("x", 32)},
			check: func(t *testing.T, c serveConfig) {
				g := c.Node.Gateway
				if !c.DebugPublic || g.LongPollsPerUser != 3 || g.BodyTimeout != 2*time.Second || g.WriteTimeout != 3*time.Second {
					t.Errorf("got debug public %v, long-polls %d, body timeout %v, write timeout %v",
						c.DebugPublic, g.LongPollsPerUser, g.BodyTimeout, g.WriteTimeout)
				}
			},
		},
		{
			name: "loopback debug address",
			args: []string{"--debug-addr", "localhost:6060"},
			check: func(t *testing.T, c serveConfig) {
				if c.DebugAddr != "localhost:6060" {
					t.Errorf("got debug addr %q", c.DebugAddr)
				}
			},
		},
		{
			name: "bus from the environment",
			env:  map[string]string{"PARLEY_BUS": "nats://10.0.0.5:4222"},
			check: func(t *testing.T, c serveConfig) {
				if c.Node.BusURL != "nats://10.0.0.5:4222" {
					t.Errorf("bus %q, want PARLEY_BUS's", c.Node.BusURL)
				}
			},
		},
		{
			name: "flag=value form",
			args: []string{"--addr=127.0.0.1:1234", "-data=/tmp/eq"},
			env:  map[string]string{"PARLEY_ADDR": "127.0.0.1:9999"},
			check: func(t *testing.T, c serveConfig) {
				if c.Addr != "127.0.0.1:1234" || c.Node.Data != "/tmp/eq" {
					t.Errorf("got addr %q data %q", c.Addr, c.Node.Data)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseServe(tc.args, env(tc.env), io.Discard)
			if err != nil {
				t.Fatalf("parseServe: %v", err)
			}
			tc.check(t, c)
		})
	}
}

// TestServeInvalidConfig: a configuration that cannot work is an error before anything is
// opened or listened on.
func TestServeInvalidConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"idle timeout shorter than heartbeat", []string{"--heartbeat", "30s", "--idle-timeout", "10s"}, nil, "idle timeout"},
		{"idle timeout equal to heartbeat", []string{"--heartbeat", "30s", "--idle-timeout", "30s"}, nil, "idle timeout"},
		{"idle timeout from env", nil, map[string]string{"PARLEY_IDLE_TIMEOUT": "1s"}, "idle timeout"},
		{"zero heartbeat", []string{"--heartbeat", "0s"}, nil, "heartbeat"},
		{"negative send rate", []string{"--send-rate", "-1"}, nil, "send rate"},
		{"send rate without burst", []string{"--send-rate", "5", "--send-burst", "0"}, nil, "send"},
		{"tiny group limit", []string{"--max-group-members", "1"}, nil, "group members"},
		{"zero event retention", []string{"--event-retention", "0s"}, nil, "retention"},
		{"zero send queue", []string{"--send-queue", "0"}, nil, "send queue"},
		{"bad env value", nil, map[string]string{"PARLEY_HEARTBEAT": "soon"}, "PARLEY_HEARTBEAT"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "log-level"},
		{"bad log format", []string{"--log-format", "xml"}, nil, "log-format"},
		{"one-character admin secret", []string{"--admin-secret", "s"}, nil, "at least 32"},
		{"31-byte admin secret", []string{"--admin-secret", strings.Repeat("x", 31)}, nil, "at least 32"},
		{"public debug address", []string{"--debug-addr", ":6060"}, nil, "--debug-addr-public"},
		{"remote debug address", []string{"--debug-addr", "192.0.2.1:6060"}, nil, "--debug-addr-public"},
		{"zero long-polls per user", []string{"--longpolls-per-user", "0"}, nil, "long-polls"},
		{"zero body timeout", []string{"--body-timeout", "0s"}, nil, "body timeout"},
		{"zero write timeout", []string{"--write-timeout", "0s"}, nil, "write timeout"},
		{"batch size without postgres", []string{"--postgres-max-batch", "12"}, nil, "only used with --store postgres"},
		{"batch wait without postgres", []string{"--postgres-batch-wait", "5ms"}, nil, "only used with --store postgres"},
		{"bus creds without a bus", []string{"--bus-creds", "/nonexistent/node.creds"}, nil, "only used with --bus"},
		{"bus TLS from env without a bus", nil, map[string]string{"PARLEY_BUS_TLS_CA": "/nonexistent/ca.pem"}, "only used with --bus"},
		{"bus client certificate without key", []string{"--bus", "nats://127.0.0.1:4222", "--bus-tls-cert", "/nonexistent/c.pem"}, nil, "both or neither"},
		{"bus creds file missing", []string{"--bus", "nats://127.0.0.1:4222", "--bus-creds", "/nonexistent/node.creds"}, nil, "creds file"},
		{"bus creds and nkey", []string{"--bus", "nats://127.0.0.1:4222", "--bus-creds", "/a", "--bus-nkey", "/b"}, nil, "give one"},
		{"no push service host", []string{"--webpush-hosts", ""}, nil, "--webpush-hosts"},
		{"push service host with a path", []string{"--webpush-hosts", "push.example.com/x"}, nil, "--webpush-hosts"},
		{"zero push devices", []string{"--push-max-devices", "0"}, nil, "max push devices"},
		{"apns without a topic", []string{"--apns-key-file", "k.p8", "--apns-key-id", "ABC123DEFG", "--apns-team-id", "DEF456GHIJ"}, nil, "--apns-topic"},
		{"negative batch size", []string{"--store", "postgres", "--postgres-url", "postgres://127.0.0.1:1/x", "--postgres-max-batch", "-1"}, nil, "--postgres-max-batch (PARLEY_POSTGRES_MAX_BATCH) must not be negative"},
		{"postgres without a url", []string{"--store", "postgres"}, nil, "--postgres-url (PARLEY_POSTGRES_URL) is required with --store postgres"},
		{"url without postgres", []string{"--postgres-url", "postgres://127.0.0.1:1/x"}, nil, "--postgres-url (PARLEY_POSTGRES_URL) is only used with --store postgres"},
		{"relaxed on postgres", []string{"--store", "postgres", "--postgres-url", "postgres://127.0.0.1:1/x", "--relaxed-durability"}, nil, "--relaxed-durability (PARLEY_RELAXED_DURABILITY) is for the embedded engines"},
		{"bad push content", []string{"--push-content", "all"}, nil, "--push-content (PARLEY_PUSH_CONTENT) must be none or preview"},
		{"negative push grace", []string{"--push-grace", "-1s"}, nil, "--push-grace (PARLEY_PUSH_GRACE) must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--admin-secret", testSecret}, tc.args...)
			_, stderr, err := runCmd(t, env(tc.env), args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("serve %q: error %v, want one containing %q\nstderr: %s", tc.args, err, tc.wantErr, stderr)
			}
			for field := range configFlags { // the operator sees flags, not Go field names
				if strings.Contains(err.Error(), field+" ") {
					t.Errorf("serve %q: error %q names the config field %s instead of its flag", tc.args, err, field)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("invalid configuration touched the data directory (stat: %v)", err)
			}
		})
	}
}

// inproc is `parley serve` running in this process through run().
type inproc struct {
	URL    string
	stdout *lineWriter
	stderr *lineWriter
	cancel context.CancelFunc // the SIGTERM of an in-process server
	done   chan error
}

// runServe starts run(serve args...) in a goroutine and waits for its announced address.
func runServe(t *testing.T, getenv func(string) string, args ...string) *inproc {
	t.Helper()
	if getenv == nil {
		getenv = env(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &inproc{stdout: newLineWriter(), stderr: newLineWriter(), cancel: cancel, done: make(chan error, 1)}
	argv := append([]string{"parley", "serve", "--addr", "127.0.0.1:0", "--log-level", "warn"}, args...)
	go func() { s.done <- run(ctx, argv, getenv, s.stdout, s.stderr) }()
	t.Cleanup(func() { s.stop(t) })
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	select {
	case s.URL = <-s.stdout.urls:
	case err := <-s.done:
		s.done <- err
		t.Fatalf("serve returned before listening: %v\nstderr: %s", err, s.stderr)
	case <-timer.C:
		t.Fatalf("serve announced no address within 15s\nstdout: %s\nstderr: %s", s.stdout, s.stderr)
	}
	// One answered request before anyone stops the server. Besides proving it serves, this
	// orders the test after server.Serve's assignment of its http.Server (the response's
	// write and read syscalls are a happens-before edge for the race detector): serve's
	// Shutdown reads that field without synchronisation (see the report on server.go), and a
	// stop right after the announcement is reported as a data race.
	waitHealthy(t, s.URL, nil)
	return s
}

// stop cancels serve's context and returns run's result; safe to call more than once.
func (s *inproc) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	select {
	case err := <-s.done:
		s.done <- err // keep it for a later call
		return err
	case <-timer.C:
		t.Fatalf("serve did not return within 15s of its context ending")
		return nil
	}
}

// TestServeGeneratesAdminSecret: without --admin-secret and PARLEY_ADMIN_SECRET, serve creates
// DATA/admin.secret (mode 0600), prints the secret once, and a later start reuses it silently.
func TestServeGeneratesAdminSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data") // not there yet: serve creates it

	first := runServe(t, nil, "--data", dir)
	path := filepath.Join(dir, "admin.secret")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no admin secret file: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, perm)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(raw))
	if len(secret) < 32 {
		t.Fatalf("generated secret %q is too short", secret)
	}
	out := first.stdout.String()
	if n := strings.Count(out, secret); n != 1 {
		t.Errorf("first start printed the secret %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "generated admin secret") {
		t.Errorf("first start does not say it generated the secret:\n%s", out)
	}
	if strings.Contains(first.stderr.String(), secret) {
		t.Errorf("the secret leaked into the log:\n%s", first.stderr)
	}
	mustCreateUser(ctx, t, first.URL, secret, "alice")
	if err := first.stop(t); err != nil {
		t.Fatalf("first serve: %v", err)
	}

	second := runServe(t, nil, "--data", dir)
	if out := second.stdout.String(); strings.Contains(out, secret) || strings.Contains(out, "generated") {
		t.Errorf("second start printed the secret again:\n%s", out)
	}
	mustCreateUser(ctx, t, second.URL, secret, "bob")
	if raw2, _ := os.ReadFile(path); string(raw2) != string(raw) {
		t.Errorf("admin.secret changed between starts")
	}
	if err := second.stop(t); err != nil {
		t.Fatalf("second serve: %v", err)
	}
}

func mustCreateUser(ctx context.Context, t *testing.T, baseURL, secret, user string) {
	t.Helper()
	if _, _, err := client.NewAdmin(baseURL, secret, nil).CreateUser(ctx, user, ""); err != nil {
		t.Fatalf("create %s with the admin secret: %v", user, err)
	}
}

// TestServeConfiguredFromEnv: serve takes its data directory and admin secret from PARLEY_*
// variables, and a flag wins over its variable.
func TestServeConfiguredFromEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "envdata")
	s := runServe(t, env(map[string]string{
		"PARLEY_DATA":         dir,
		"PARLEY_ADMIN_SECRET": "env-secret-0123456789abcdef0123456789",
		"PARLEY_ADDR":         "256.0.0.1:1", // unusable: the --addr flag must win
	}))
	mustCreateUser(ctx, t, s.URL, "env-secret-0123456789abcdef0123456789", "carol")
	if _, err := os.Stat(filepath.Join(dir, "admin.secret")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a secret was generated although PARLEY_ADMIN_SECRET is set (stat: %v)", err)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}

	s = runServe(t, env(map[string]string{"PARLEY_DATA": dir, "PARLEY_ADMIN_SECRET": "env-secret-0123456789abcdef0123456789"}),
		"--admin-secret", "flag-secret-0123456789abcdef012345678")
	mustCreateUser(ctx, t, s.URL, "flag-secret-0123456789abcdef012345678", "dave")
	_, _, err := client.NewAdmin(s.URL, "env-secret-0123456789abcdef0123456789", nil).CreateUser(ctx, "eve", "")
	if client.ErrorCode(err) != http.StatusUnauthorized {
		t.Errorf("the environment's secret still works beside --admin-secret: %v", err)
	}
}

// TestOperatorCommandsOffline: `user add` and `token` work on a data directory with no server
// running, and the token works against a server started on it afterwards. While the server
// runs, they work beside it on SQLite, and on Pebble (one process per directory) they are
// refused with a pointer to the admin API. It runs on each engine: the default (Pebble) and
// a directory created with --store sqlite.
func TestOperatorCommandsOffline(t *testing.T) {
	for _, engine := range []string{"", "sqlite"} {
		t.Run(cmp.Or(engine, "default"), func(t *testing.T) { testOperatorCommandsOffline(t, engine) })
	}
}

func testOperatorCommandsOffline(t *testing.T, engine string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	getenv := env(map[string]string{"PARLEY_DATA": dir}) // the data directory from the environment

	args := []string{"user", "add", "alice", "--name", "Alice"}
	if engine != "" {
		args = append(args, "--store", engine) // only the command that creates the directory names it
	}
	out, stderr, err := runCmd(t, getenv, args...)
	if err != nil || out != "created user alice\n" {
		t.Fatalf("user add alice: %q, %v\nstderr: %s", out, err, stderr)
	}
	if got, want := server.DetectEngine(dir), cmp.Or(engine, server.DefaultEngine); got != want {
		t.Fatalf("user add created a %q directory, want %q", got, want)
	}
	out, _, err = runCmd(t, getenv, "user", "add", "alice")
	if err != nil || out != "user alice already exists\n" {
		t.Fatalf("user add alice again: %q, %v", out, err)
	}
	if out, _, err = runCmd(t, nil, "user", "add", "--data", dir, "bob"); err != nil || out != "created user bob\n" {
		t.Fatalf("user add bob: %q, %v", out, err)
	}
	out, stderr, err = runCmd(t, getenv, "token", "alice", "phone", "--ttl", "1h")
	if err != nil {
		t.Fatalf("token: %v\nstderr: %s", err, stderr)
	}
	token := strings.TrimSuffix(out, "\n")
	if token == "" || strings.ContainsAny(token, " \n") {
		t.Fatalf("token printed %q, want the token alone on a line", out)
	}
	if !strings.Contains(stderr, "expires ") {
		t.Errorf("token stderr %q does not say when it expires", stderr)
	}
	if _, _, err := runCmd(t, getenv, "token", "--ttl", "1h", "mallory", "phone"); err == nil {
		t.Errorf("token for an unknown user succeeded")
	}

	s := runServe(t, getenv, "--admin-secret", testSecret)
	c := client.New(client.Options{BaseURL: s.URL, Token: token})
	conv, err := c.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatalf("the offline token does not work against the server: %v", err)
	}
	ack, err := c.Send(ctx, conv.ConvID, client.ContentText, "hi", nil)
	if err != nil || ack.Seq != 1 {
		t.Fatalf("send with the offline token: %+v, %v", ack, err)
	}
	// And the other way round: a token minted from the data directory while the server runs.
	out, _, err = runCmd(t, getenv, "token", "bob", "laptop")
	if engine != "sqlite" {
		if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "/v1/admin/tokens") {
			t.Fatalf("token on a Pebble directory while serving: %q, %v; want a refusal naming the admin API", out, err)
		}
		if _, _, err := runCmd(t, getenv, "user", "add", "carol"); err == nil || !strings.Contains(err.Error(), "/v1/admin/users") {
			t.Fatalf("user add on a Pebble directory while serving: %v; want a refusal naming the admin API", err)
		}
		if err := s.stop(t); err != nil {
			t.Fatal(err)
		}
		out, _, err = runCmd(t, getenv, "token", "bob", "laptop")
		s = runServe(t, getenv, "--admin-secret", testSecret)
	}
	if err != nil {
		t.Fatalf("token for bob: %v", err)
	}
	bob := client.New(client.Options{BaseURL: s.URL, Token: strings.TrimSpace(out)})
	page, err := bob.History(ctx, conv.ConvID, client.HistoryQuery{})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].MsgID != ack.MsgID {
		t.Fatalf("bob's history with a token minted from the data directory: %+v, %v", page, err)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMDrain: a subprocess server with an open WebSocket and a waiting long-poll gets
// SIGTERM: the long-poll is answered 200 with no events, the WebSocket is closed with 1001,
// and the process exits 0 well within 10 seconds.
func TestSIGTERMDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a subprocess server; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const secret = "drain-secret-0123456789abcdef0123456789"
	p := startServe(t, t.TempDir(), "--admin-secret", secret)
	tokens := mintUsers(ctx, t, p.URL, secret, "alice", "bob")
	alice := client.New(client.Options{BaseURL: p.URL, Token: tokens[0]})
	if _, err := alice.CreateDirect(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	snap, err := alice.Snapshot(ctx, 0)
	if err != nil || snap.Cursor < 1 {
		t.Fatalf("snapshot: %+v, %v", snap, err)
	}

	// An open WebSocket of bob, proven live by a ping round trip.
	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "/v1/ws?token=" + tokens[1]
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("dial websocket: %v", err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"id":"p1","op":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for pong: %v", err)
		}
		if strings.Contains(string(data), `"pong"`) {
			break
		}
	}
	wsEnd := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				wsEnd <- err
				return
			}
		}
	}()

	// A long-poll of alice waiting at her latest cursor.
	type pollResult struct {
		status int
		body   []byte
		err    error
	}
	pollEnd := make(chan pollResult, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			p.URL+"/v1/sync?wait=30&cursor="+itoa(snap.Cursor), nil)
		req.Header.Set("Authorization", "Bearer "+tokens[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			pollEnd <- pollResult{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		pollEnd <- pollResult{resp.StatusCode, body, err}
	}()
	waitMetric(t, p.URL, "parley_longpolls_waiting", "1")
	waitMetric(t, p.URL, "parley_ws_connections", "1")

	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()

	select {
	case r := <-pollEnd:
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("long-poll at SIGTERM: %d %s %v, want 200", r.status, r.body, r.err)
		}
		var resp client.SyncResponse
		if err := json.Unmarshal(r.body, &resp); err != nil {
			t.Fatalf("long-poll body %s: %v", r.body, err)
		}
		if len(resp.Events) != 0 || resp.Cursor != snap.Cursor || resp.Events == nil {
			t.Errorf("long-poll answered %s, want no events (\"events\":[]) at cursor %d", r.body, snap.Cursor)
		}
		t.Logf("long-poll answered %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	case <-deadline.C:
		t.Fatalf("waiting long-poll not answered within 10s of SIGTERM")
	}
	select {
	case err := <-wsEnd:
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Errorf("websocket ended with %v, want close code 1001", err)
		}
	case <-deadline.C:
		t.Fatalf("websocket not closed within 10s of SIGTERM")
	}
	select {
	case <-p.done:
	case <-deadline.C:
		t.Fatalf("process still running 10s after SIGTERM\nstderr:\n%s", p.stderr)
	}
	took := time.Since(sent)
	if p.err != nil {
		t.Fatalf("process exited with %v after SIGTERM, want status 0\nstderr:\n%s", p.err, p.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("drain took %v: not well within 10s", took)
	}
	t.Logf("exited 0 %v after SIGTERM", took.Round(time.Millisecond))
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// waitMetric polls GET /metrics until the unlabelled sample name has value want (10 s at most).
func waitMetric(t *testing.T, baseURL, name, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := "(none)"
	for {
		resp, err := http.Get(baseURL + "/metrics")
		if err == nil {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
					last = v
				}
			}
			resp.Body.Close()
			if last == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s is %s, want %s (waited 10s)", name, last, want)
		}
		<-tick.C
	}
}

// mintUsers creates users through the admin API of the server at baseURL and returns a
// token for each one's device "d1", in order.
func mintUsers(ctx context.Context, t *testing.T, baseURL, secret string, users ...string) []string {
	t.Helper()
	admin := client.NewAdmin(baseURL, secret, nil)
	var tokens []string
	for _, u := range users {
		if _, _, err := admin.CreateUser(ctx, u, ""); err != nil {
			t.Fatal(err)
		}
		tok, err := admin.IssueToken(ctx, u, "d1", 0)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok.Token)
	}
	return tokens
}
