package bustest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// TLSFiles are the PEM files of a test CA and the server and client certificates it
// signed, made by MakeTLS.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string // for 127.0.0.1 and localhost
	ClientCert, ClientKey string
}

// MakeTLS writes a new CA, a server certificate for 127.0.0.1 and localhost and a client
// certificate, both signed by it, into dir.
func MakeTLS(t testing.TB, dir string) TLSFiles {
	t.Helper()
	caKey, caCert, caDER := newCert(t, "parley test CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	})
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	sKey, _, sDER := newCert(t, "nats server", caCert, caKey, func(c *x509.Certificate) {
		c.IPAddresses, c.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	writePEM(t, f.ServerCert, "CERTIFICATE", sDER)
	writeKey(t, f.ServerKey, sKey)
	cKey, _, cDER := newCert(t, "parley node", caCert, caKey, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	writePEM(t, f.ClientCert, "CERTIFICATE", cDER)
	writeKey(t, f.ClientKey, cKey)
	return f
}

// newCert makes a certificate for name, signed by parent (self-signed if nil).
func newCert(t testing.TB, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey,
	shape func(*x509.Certificate)) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	shape(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writeKey(t testing.TB, file string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, file, "PRIVATE KEY", der)
}

func writePEM(t testing.TB, file, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Operator is a NATS operator with one account, for a server in operator mode (JWT
// authentication, as `nsc` sets it up), made by NewOperator.
type Operator struct {
	operator nkeys.KeyPair
	account  nkeys.KeyPair
	opJWT    string
	accPub   string
	accJWT   string
}

// NewOperator makes an operator and an account it signed.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	o := &Operator{operator: mustKey(t, nkeys.CreateOperator), account: mustKey(t, nkeys.CreateAccount)}
	opPub, _ := o.operator.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "parley-test"
	var err error
	if o.opJWT, err = oc.Encode(o.operator); err != nil {
		t.Fatal(err)
	}
	o.accPub, _ = o.account.PublicKey()
	ac := jwt.NewAccountClaims(o.accPub)
	ac.Name = "parley"
	if o.accJWT, err = ac.Encode(o.operator); err != nil {
		t.Fatal(err)
	}
	return o
}

// ServerConfig is the part of a nats-server configuration that trusts the operator and
// knows its account (a memory resolver, preloaded).
func (o *Operator) ServerConfig() string {
	return fmt.Sprintf("operator: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n}\n", o.opJWT, o.accPub, o.accJWT)
}

// UserCreds writes a .creds file (user JWT and nkey seed) of a new user of the account
// into dir and returns its path.
func (o *Operator) UserCreds(t testing.TB, dir, name string) string {
	t.Helper()
	user := mustKey(t, nkeys.CreateUser)
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	userJWT, err := uc.Encode(o.account)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".creds")
	if err := os.WriteFile(file, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// NewUserNkey makes a user nkey, writes its seed into dir and returns the seed file's
// path and the public key, which the server's configuration lists.
func NewUserNkey(t testing.TB, dir, name string) (seedFile, public string) {
	t.Helper()
	kp := mustKey(t, nkeys.CreateUser)
	seed, _ := kp.Seed()
	public, _ = kp.PublicKey()
	seedFile = filepath.Join(dir, name+".nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, public
}

func mustKey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}
