package main

// `parley serve` on an authenticated, TLS NATS bus (docs/deployment.md, "Securing the
// bus"), and the secrets of its connection strings kept out of everything it prints.

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/internal/bus/bustest"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// TestServeBusCredsAndTLS: two nodes on one PostgreSQL database, linked by a nats-server in
// operator mode (JWT auth) that also requires mutual TLS, start with --bus-creds and
// --bus-tls-*, and a message sent on one reaches a WebSocket on the other through that bus.
// A node without the creds does not start.
func TestServeBusCredsAndTLS(t *testing.T) {
	dir := t.TempDir()
	f := bustest.MakeTLS(t, dir)
	op := bustest.NewOperator(t)
	creds := op.UserCreds(t, dir, "node")
	ns := bustest.StartNATSServer(t, dir, op.ServerConfig()+
		`tls { cert_file: "`+f.ServerCert+`", key_file: "`+f.ServerKey+`", ca_file: "`+f.CA+`", verify: true, timeout: 5 }`+"\n")
	args := []string{"--admin-secret", testSecret, "--store", "postgres", "--postgres-url", pgtest.SchemaURL(t, t.Name()), "--blob-store", "file://" + t.TempDir(),
		"--bus", ns.URL("tls", ""), "--bus-tls-ca", f.CA, "--bus-tls-cert", f.ClientCert, "--bus-tls-key", f.ClientKey}
	a := runServe(t, nil, append(args, "--data", t.TempDir(), "--bus-creds", creds)...)
	b := runServe(t, nil, append(args, "--data", t.TempDir(), "--bus-creds", creds)...)

	_, _, err := runCmdArgs(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, args...))
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("a node without --bus-creds: serve = %v, want the credentials refused", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := client.NewAdmin(a.URL, testSecret, nil)
	tokens := map[string]string{}
	for _, u := range []string{"alice", "bob"} {
		mustCreateUser(ctx, t, a.URL, testSecret, u)
		tok, err := admin.IssueToken(ctx, u, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens[u] = tok.Token
	}
	got := make(chan string, 10)
	alice := client.New(client.Options{BaseURL: a.URL, Token: tokens["alice"], UserID: "alice",
		OnEvent: func(ev client.SyncEvent) {
			if m, err := ev.Message(); err == nil {
				got <- string(m.Content)
			}
		}})
	if err := alice.Connect(ctx); err != nil { // returns once node A follows alice on the bus
		t.Fatal(err)
	}
	defer alice.Close()
	bob := client.New(client.Options{BaseURL: b.URL, Token: tokens["bob"], UserID: "bob"})
	conv, err := bob.CreateDirect(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.SendText(ctx, conv.ConvID, "over the authenticated bus"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if !strings.Contains(m, "over the authenticated bus") {
			t.Fatalf("alice got %s", m)
		}
	case <-ctx.Done():
		t.Fatal("the message sent on node B never reached alice's WebSocket on node A")
	}
	for _, n := range []*inproc{a, b} {
		if h := healthz(t, n.URL); !strings.Contains(h, `"bus":"ok"`) {
			t.Errorf("healthz %s, want bus ok", h)
		}
	}
}

// runCmdArgs is runCmd with no environment.
func runCmdArgs(t *testing.T, args []string) (string, string, error) {
	t.Helper()
	return runCmd(t, nil, args...)
}

// healthz returns the body of GET /healthz.
func healthz(t *testing.T, baseURL string) string {
	t.Helper()
	resp, err := http.Get(baseURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestServeHidesSecrets: a node started with a password in its bus URL and in its
// PostgreSQL URL prints neither, in its log (at debug level), its output or /healthz, and
// no start that fails (wrong password, nothing listening, a malformed URL) shows them in
// its error or its log.
func TestServeHidesSecrets(t *testing.T) {
	const busSecret, pgSecret = "bus-s3cret-Q7", "pg-s3cret-Z9"
	ns := bustest.StartNATSServer(t, "", `authorization { users = [ { user: parley, password: "`+busSecret+`" } ] }`)
	pg, err := url.Parse(pgtest.SchemaURL(t, t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	pg.User = url.UserPassword(pg.User.Username(), pgSecret) // trust authentication ignores it
	busURL := ns.URL("nats", "parley:"+busSecret)
	base := []string{"--admin-secret", testSecret, "--store", "postgres", "--log-level", "debug", "--blob-store", "file://" + t.TempDir()}

	n := runServe(t, nil, append(base, "--data", t.TempDir(), "--postgres-url", pg.String(), "--bus", busURL)...)
	health := healthz(t, n.URL)
	if !strings.Contains(health, `"bus":"ok"`) {
		t.Errorf("healthz %s, want bus ok", health)
	}
	if err := n.stop(t); err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{"log": n.stderr.String(), "output": n.stdout.String(), "/healthz": health}
	if !strings.Contains(shown["log"], "parley:xxxxx@") {
		t.Errorf("the log does not name the bus (masked):\n%s", shown["log"])
	}

	closed := closedPort(t)
	pgClosed := *pg
	pgClosed.Host = closed
	fails := map[string][]string{
		"wrong bus password": {"--postgres-url", pg.String(), "--bus", ns.URL("nats", "parley:wrong-"+busSecret)},
		"no bus server":      {"--postgres-url", pg.String(), "--bus", "nats://parley:" + busSecret + "@" + closed},
		"bus URL list":       {"--postgres-url", pg.String(), "--bus", "nats://" + busSecret + "@" + closed + ",nats://parley:" + busSecret + "@" + closed},
		"bad bus scheme":     {"--postgres-url", pg.String(), "--bus", "http://parley:" + busSecret + "@" + closed},
		"no database":        {"--postgres-url", pgClosed.String(), "--bus", busURL},
		"key=value database": {"--postgres-url", "host=127.0.0.1 port=" + strings.Split(closed, ":")[1] + " password=" + pgSecret, "--bus", busURL},
	}
	for name, args := range fails {
		stdout, stderr, err := runCmdArgs(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "d")}, append(base, args...)...))
		if err == nil {
			t.Errorf("%s: serve started", name)
			continue
		}
		t.Logf("%s: %v", name, err)
		shown[name+": error"], shown[name+": log"] = err.Error(), stderr+stdout
	}
	for where, text := range shown {
		for _, secret := range []string{busSecret, pgSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the secret %q:\n%s", where, secret, text)
			}
		}
	}
}

// closedPort returns a loopback host:port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
