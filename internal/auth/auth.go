// Package auth mints and verifies device tokens and keeps the server's secrets on disk.
//
// A token is "v1.<claims>.<mac>": base64url JSON claims and their HMAC-SHA256 under the
// server's signing key. It binds one user and one device, expires, and carries the user's
// token generation: revoking a user increments the generation, so every earlier token stops
// verifying at once and tokens minted afterwards work. Generations rather than timestamps
// keep revocation exact however close a revoke and a mint fall in time.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Errors returned by Parse (ErrRevoked by callers that check the generation).
var (
	ErrMalformed = errors.New("auth: malformed token")
	ErrForged    = errors.New("auth: bad token signature")
	ErrExpired   = errors.New("auth: token expired")
	ErrRevoked   = errors.New("auth: token revoked")
)

// b64 decodes both parts of a token. Strict refuses set padding bits in the last
// character: without it, each token has four spellings that all verify, so a token
// blocklisted or logged by its text could be replayed in another spelling.
var b64 = base64.RawURLEncoding.Strict()

// Claims are what a token asserts.
type Claims struct {
	UserID    string `json:"u"`
	DeviceID  string `json:"d"`
	Gen       int64  `json:"g"`
	ExpiresAt int64  `json:"e"` // Unix ms
}

// Signer mints and verifies tokens with one key.
type Signer struct {
	key []byte
}

// NewSigner returns a Signer using key (at least 32 bytes recommended).
func NewSigner(key []byte) *Signer { return &Signer{key: bytes.Clone(key)} }

const prefix = "v1."

// Mint returns a token asserting c.
func (s *Signer) Mint(c Claims) string {
	body, _ := json.Marshal(c) // Claims always marshals
	payload := b64.EncodeToString(body)
	return prefix + payload + "." + b64.EncodeToString(s.mac(payload))
}

// Parse verifies tok and returns its claims. nowMS is the current time in Unix ms.
func (s *Signer) Parse(tok string, nowMS int64) (Claims, error) {
	rest, ok := strings.CutPrefix(tok, prefix)
	if !ok || len(tok) > 1024 {
		return Claims{}, ErrMalformed
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return Claims{}, ErrMalformed
	}
	got, err := b64.DecodeString(sig)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	if subtle.ConstantTimeCompare(got, s.mac(payload)) != 1 {
		return Claims{}, ErrForged
	}
	body, err := b64.DecodeString(payload)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil || c.UserID == "" || c.DeviceID == "" {
		return Claims{}, ErrMalformed
	}
	if nowMS >= c.ExpiresAt {
		return Claims{}, ErrExpired
	}
	return c, nil
}

func (s *Signer) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// EqualSecret compares an offered admin secret with the configured one in constant time.
func EqualSecret(offered, secret string) bool {
	if secret == "" {
		return false
	}
	a := sha256.Sum256([]byte(offered))
	b := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// File names of the secrets kept in the data directory.
const (
	SigningKeyFile  = "signing.key"
	AdminSecretFile = "admin.secret"
	// DirectIDKeyFile keys the derivation of direct conversation ids. It is apart from the
	// signing key so that replacing that key (to invalidate every token) does not change the
	// ids, which would split every pair's conversation in two.
	DirectIDKeyFile = "direct-id.key"
)

// LoadOrCreateSecret returns the hex secret stored in dir/name, creating it (mode 0600, 32
// random bytes) if it does not exist. created reports whether it was just made.
func LoadOrCreateSecret(dir, name string) (secret string, created bool, err error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", false, fmt.Errorf("auth: %s is empty", path)
		}
		return s, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("auth: read secret: %w", err)
	}
	s, err := NewSecret()
	if err != nil {
		return "", false, err
	}
	switch err := createDurably(path, []byte(s+"\n")); {
	case errors.Is(err, os.ErrExist): // another process made it first: use theirs
		return LoadOrCreateSecret(dir, name)
	case err != nil:
		return "", false, fmt.Errorf("auth: create secret: %w", err)
	}
	return s, true, nil
}

// NewSecret returns a new secret: 32 random bytes as 64 hex digits.
func NewSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("auth: random: %w", err)
	}
	return hex.EncodeToString(raw), nil
}

// createDurably creates path holding data, or fails with os.ErrExist if it exists. The data
// is written and fsynced in a temporary file that is then linked into place (link, unlike
// rename, refuses to replace) and the directory fsynced, so a crash leaves either no file or
// the whole one, never an empty secret.
func createDurably(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
