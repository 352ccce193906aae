package bus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ErrAuthConfig is the error of a NATSAuth that cannot work: a file that cannot be read
// or parsed, a certificate without its key, two kinds of credentials at once.
var ErrAuthConfig = errors.New("bus: nats auth")

// ErrRefused is OpenNATS's error when the server refused the bus's credentials (none,
// wrong, expired or revoked): unlike ErrUnavailable, trying again will not help.
var ErrRefused = errors.New("bus: nats refused the credentials")

// NATSAuth is how a node proves itself to the NATS server and checks the server, in the
// ways NATS deployments use. User and password, or a token, go in the URL itself
// ("nats://user:pass@host:4222", "nats://token@host:4222"); the rest are files, read at
// every (re)connection by nats.go, so that a rotated file is used from the next
// connection on without a restart of the node.
// The zero value is none of them (a NATS server without auth, plaintext).
type NATSAuth struct {
	// CredsFile is a NATS .creds file (a user JWT and its nkey seed, as `nsc` writes it),
	// for a server in operator mode.
	CredsFile string
	// NkeyFile holds a user nkey seed ("SU..."), for a server that lists the user's
	// public nkey.
	NkeyFile string
	// TLSCA is a PEM file of the CA certificates that verify the server's. Given, or with
	// a client certificate, the connection must be TLS: a server that offers none is
	// refused. Without it (a tls:// URL) the system's roots verify the server.
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and its key, for a server that
	// verifies clients (mutual TLS). Both or neither.
	TLSCert string
	TLSKey  string
}

// IsZero reports whether a has no setting at all.
func (a NATSAuth) IsZero() bool { return a == NATSAuth{} }

// Validate reads every file a names and checks it holds what it should, so that a
// misconfigured node stops at start with the file and the problem named. Its errors wrap
// ErrAuthConfig.
func (a NATSAuth) Validate() error {
	_, err := a.options()
	return err
}

// options returns the nats.go options of a, having checked its files.
func (a NATSAuth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.CredsFile != "" && a.NkeyFile != "" {
		return nil, fmt.Errorf("%w: a .creds file and an nkey seed file are two ways to authenticate: give one", ErrAuthConfig)
	}
	if a.CredsFile != "" {
		if err := checkCreds(a.CredsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.NkeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(a.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey seed file %s: %v", ErrAuthConfig, a.NkeyFile, err)
		}
		opts = append(opts, opt)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, fmt.Errorf("%w: a TLS client certificate needs its key, and a key its certificate: give both or neither", ErrAuthConfig)
	}
	if err := a.checkTLS(); err != nil {
		return nil, err
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// checkCreds checks that a .creds file holds a user JWT and a user nkey seed: nats.go
// itself would only read it at the first connection, and fail with less to go on.
func checkCreds(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: creds file: %v", ErrAuthConfig, err)
	}
	// ParseDecoratedJWT takes a file without the JWT's markers as the JWT itself.
	if j, err := nkeys.ParseDecoratedJWT(data); err != nil || strings.Count(j, ".") != 2 {
		return fmt.Errorf("%w: creds file %s holds no user JWT", ErrAuthConfig, file)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return fmt.Errorf("%w: creds file %s holds no user nkey seed: %v", ErrAuthConfig, file, err)
	}
	kp.Wipe()
	return nil
}

// checkTLS loads a's CA and client certificate once, to name the file that is wrong;
// nats.go loads them again at every connection (RootCAs, ClientCert).
func (a NATSAuth) checkTLS() error {
	if a.TLSCA != "" {
		pem, err := os.ReadFile(a.TLSCA)
		if err != nil {
			return fmt.Errorf("%w: TLS CA: %v", ErrAuthConfig, err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: TLS CA %s holds no PEM certificate", ErrAuthConfig, a.TLSCA)
		}
	}
	if a.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey); err != nil {
			return fmt.Errorf("%w: TLS client certificate %s and key %s: %v", ErrAuthConfig, a.TLSCert, a.TLSKey, err)
		}
	}
	return nil
}
