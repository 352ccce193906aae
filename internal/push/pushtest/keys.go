package pushtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// APNsKey is a provider signing key as Apple hands it out: a .p8 file and the ids that go
// with it.
type APNsKey struct {
	Path    string // the .p8 file (PKCS#8 PEM of an ECDSA P-256 key) in the test's temp dir
	KeyID   string // 10 characters, the JWT's kid
	TeamID  string // 10 characters, the JWT's iss
	Private *ecdsa.PrivateKey
}

// NewAPNsKey makes a fresh APNs key and writes its .p8 file to tb.TempDir().
func NewAPNsKey(tb testing.TB) APNsKey {
	tb.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		tb.Fatal(err)
	}
	k := APNsKey{KeyID: randomKeyID(10), TeamID: randomKeyID(10), Private: priv}
	k.Path = filepath.Join(tb.TempDir(), "AuthKey_"+k.KeyID+".p8")
	writeKeyPEM(tb, k.Path, der)
	return k
}

// ServiceAccount is a Google service account key file, as FCM's console hands it out, with
// token_uri pointing wherever the test wants tokens minted.
type ServiceAccount struct {
	Path        string // the JSON file in the test's temp dir
	ProjectID   string
	ClientEmail string
	KeyID       string // private_key_id, the assertion's kid
	TokenURI    string
	Private     *rsa.PrivateKey
}

// WriteServiceAccount makes a fresh RSA key and writes a service-account JSON for projectID
// whose token_uri is tokenURI to tb.TempDir().
func WriteServiceAccount(tb testing.TB, projectID, tokenURI string) ServiceAccount {
	tb.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		tb.Fatal(err)
	}
	sa := ServiceAccount{
		Path:        filepath.Join(tb.TempDir(), "service-account.json"),
		ProjectID:   projectID,
		ClientEmail: "parley-push@" + projectID + ".iam.gserviceaccount.com",
		KeyID:       randomKeyID(40),
		TokenURI:    tokenURI,
		Private:     priv,
	}
	raw, err := json.MarshalIndent(map[string]string{
		"type":           "service_account",
		"project_id":     sa.ProjectID,
		"private_key_id": sa.KeyID,
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   sa.ClientEmail,
		"client_id":      "100000000000000000001",
		"token_uri":      sa.TokenURI,
	}, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(sa.Path, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	return sa
}

func writeKeyPEM(tb testing.TB, path string, der []byte) {
	tb.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// randomID returns n random characters of [A-Z0-9], the alphabet of Apple's key and team ids.
func randomKeyID(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
