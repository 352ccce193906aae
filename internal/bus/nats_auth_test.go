package bus_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/bus/bustest"
)

// Each way NATS deployments authenticate, against a nats-server of the test's own started
// with it: the right credentials carry messages, wrong or missing ones fail to open with
// an error saying so, and never with the secret in it.

// roundTrip checks that a bus of url and auth publishes to and receives from itself.
func roundTrip(t *testing.T, url string, auth bus.NATSAuth) {
	t.Helper()
	b, err := bus.OpenNATS(url, bus.NATSOptions{Prefix: bustest.RandomPrefix(t), Auth: auth, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("OpenNATS with the right credentials: %v", err)
	}
	defer b.Close()
	got := make(chan string, 10)
	subscribe(t, b, "t.auth", got)
	if err := b.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), "t.auth", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	waitMsg(t, got, "hello")
}

// refused checks that a bus of url and auth does not open, with err wrapping want and
// naming none of secrets.
func refused(t *testing.T, what, url string, auth bus.NATSAuth, want error, secrets ...string) {
	t.Helper()
	b, err := bus.OpenNATS(url, bus.NATSOptions{Auth: auth, ConnectTimeout: 5 * time.Second})
	if err == nil {
		b.Close()
		t.Fatalf("%s: OpenNATS succeeded, want it refused", what)
	}
	t.Logf("%s: %v", what, err)
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want one wrapping %v", what, err, want)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q holds the secret %q", what, err, s)
		}
	}
}

func TestNATSUserPassword(t *testing.T) {
	s := bustest.StartNATSServer(t, "", `authorization { users = [ { user: alice, password: "s3cret-pw" } ] }`)
	roundTrip(t, s.URL("nats", "alice:s3cret-pw"), bus.NATSAuth{})
	refused(t, "wrong password", s.URL("nats", "alice:wr0ng-pw"), bus.NATSAuth{}, bus.ErrRefused, "wr0ng-pw")
	refused(t, "no credentials", s.URL("nats", ""), bus.NATSAuth{}, bus.ErrRefused)
}

func TestNATSToken(t *testing.T) {
	s := bustest.StartNATSServer(t, "", `authorization { token: "t0ken-abc" }`)
	roundTrip(t, s.URL("nats", "t0ken-abc"), bus.NATSAuth{})
	refused(t, "wrong token", s.URL("nats", "t0ken-xyz"), bus.NATSAuth{}, bus.ErrRefused, "t0ken-xyz")
	refused(t, "no token", s.URL("nats", ""), bus.NATSAuth{}, bus.ErrRefused)
}

func TestNATSNkey(t *testing.T) {
	dir := t.TempDir()
	seed, pub := bustest.NewUserNkey(t, dir, "node")
	other, _ := bustest.NewUserNkey(t, dir, "stranger")
	s := bustest.StartNATSServer(t, "", `authorization { users = [ { nkey: `+pub+` } ] }`)
	roundTrip(t, s.URL("nats", ""), bus.NATSAuth{NkeyFile: seed})
	refused(t, "unknown nkey", s.URL("nats", ""), bus.NATSAuth{NkeyFile: other}, bus.ErrRefused)
	refused(t, "no nkey", s.URL("nats", ""), bus.NATSAuth{}, bus.ErrRefused)
}

func TestNATSCreds(t *testing.T) {
	dir := t.TempDir()
	op := bustest.NewOperator(t)
	creds := op.UserCreds(t, dir, "node")
	foreign := bustest.NewOperator(t).UserCreds(t, dir, "foreign") // of an account the server does not know
	s := bustest.StartNATSServer(t, "", op.ServerConfig())
	roundTrip(t, s.URL("nats", ""), bus.NATSAuth{CredsFile: creds})
	refused(t, "creds of another operator", s.URL("nats", ""), bus.NATSAuth{CredsFile: foreign}, bus.ErrRefused)
	refused(t, "no creds", s.URL("nats", ""), bus.NATSAuth{}, bus.ErrRefused)
}

// With mutual TLS the server verifies the node's certificate and the node the server's:
// a node without a client certificate, or one that does not know the server's CA, does
// not connect, and a node given a CA does not talk plaintext to a server without TLS.
func TestNATSTLS(t *testing.T) {
	dir := t.TempDir()
	f := bustest.MakeTLS(t, dir)
	mtls := bustest.StartNATSServer(t, dir, `tls { cert_file: "`+f.ServerCert+`", key_file: "`+f.ServerKey+`", ca_file: "`+f.CA+`", verify: true, timeout: 5 }`)
	full := bus.NATSAuth{TLSCA: f.CA, TLSCert: f.ClientCert, TLSKey: f.ClientKey}
	roundTrip(t, mtls.URL("nats", ""), full)
	roundTrip(t, mtls.URL("tls", ""), full)
	refused(t, "no client certificate", mtls.URL("nats", ""), bus.NATSAuth{TLSCA: f.CA}, bus.ErrUnavailable)
	refused(t, "server CA unknown", mtls.URL("tls", ""), bus.NATSAuth{TLSCert: f.ClientCert, TLSKey: f.ClientKey}, bus.ErrUnavailable)

	plain := bustest.StartNATSServer(t, "", "")
	refused(t, "server without TLS", plain.URL("nats", ""), bus.NATSAuth{TLSCA: f.CA}, bus.ErrUnavailable)
}

// A NATSAuth that cannot work is refused before any connection, naming what is wrong.
func TestNATSAuthValidate(t *testing.T) {
	dir := t.TempDir()
	f := bustest.MakeTLS(t, dir)
	seed, _ := bustest.NewUserNkey(t, dir, "node")
	creds := bustest.NewOperator(t).UserCreds(t, dir, "node")
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	account := filepath.Join(dir, "account.nk")
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accSeed, _ := kp.Seed()
	if err := os.WriteFile(account, accSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		auth bus.NATSAuth
		want string // in the error; "" means valid
	}{
		{"zero", bus.NATSAuth{}, ""},
		{"creds", bus.NATSAuth{CredsFile: creds}, ""},
		{"nkey", bus.NATSAuth{NkeyFile: seed}, ""},
		{"mutual TLS", bus.NATSAuth{TLSCA: f.CA, TLSCert: f.ClientCert, TLSKey: f.ClientKey}, ""},
		{"creds and nkey", bus.NATSAuth{CredsFile: creds, NkeyFile: seed}, "give one"},
		{"creds missing", bus.NATSAuth{CredsFile: missing}, "missing"},
		{"creds junk", bus.NATSAuth{CredsFile: junk}, "no user JWT"},
		{"nkey missing", bus.NATSAuth{NkeyFile: missing}, "missing"},
		{"nkey junk", bus.NATSAuth{NkeyFile: junk}, "nkey seed file"},
		{"nkey not a user's", bus.NATSAuth{NkeyFile: account}, "nkey seed file"},
		{"cert without key", bus.NATSAuth{TLSCert: f.ClientCert}, "both or neither"},
		{"key without cert", bus.NATSAuth{TLSKey: f.ClientKey}, "both or neither"},
		{"CA missing", bus.NATSAuth{TLSCA: missing}, "TLS CA"},
		{"CA junk", bus.NATSAuth{TLSCA: junk}, "no PEM certificate"},
		{"cert and key mismatched", bus.NATSAuth{TLSCert: f.ClientCert, TLSKey: f.ServerKey}, "client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.auth.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, bus.ErrAuthConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrAuthConfig naming %q", err, tc.want)
			}
			if _, err := bus.OpenNATS(bustest.NATSURL(), bus.NATSOptions{Auth: tc.auth}); !errors.Is(err, bus.ErrAuthConfig) {
				t.Errorf("OpenNATS = %v, want ErrAuthConfig", err)
			}
		})
	}
}
