package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenRoundTripAndRejections(t *testing.T) {
	s := NewSigner([]byte("k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1"))
	c := Claims{UserID: "alice", DeviceID: "phone", Gen: 3, ExpiresAt: 2000}
	tok := s.Mint(c)
	got, err := s.Parse(tok, 1000)
	if err != nil || got != c {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, c)
	}
	other := NewSigner([]byte("k2k2k2k2k2k2k2k2k2k2k2k2k2k2k2k2"))
	// Claims of a more powerful user under the signature of alice's token.
	root := strings.Split(s.Mint(Claims{UserID: "root", DeviceID: "x", ExpiresAt: 9e15}), ".")
	forgedClaims := "v1." + root[1] + "." + strings.Split(tok, ".")[2]
	for name, tc := range map[string]struct {
		tok  string
		now  int64
		want error
	}{
		"expired":         {tok, 2000, ErrExpired},
		"other key":       {other.Mint(c), 1000, ErrForged},
		"swapped claims":  {forgedClaims, 1000, ErrForged},
		"no prefix":       {tok[3:], 1000, ErrMalformed},
		"no signature":    {tok[:strings.LastIndex(tok, ".")], 1000, ErrMalformed},
		"garbage":         {"v1.!!!.???", 1000, ErrMalformed},
		"empty":           {"", 1000, ErrMalformed},
		"admin secret":    {"0123abcd", 1000, ErrMalformed},
		"truncated sig":   {tok[:len(tok)-4], 1000, ErrMalformed}, // its last character keeps set unused bits
		"oversized token": {"v1." + strings.Repeat("a", 2000) + ".b", 1000, ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Parse(tc.tok, tc.now); !errors.Is(err, tc.want) {
				t.Fatalf("Parse error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestEqualSecret(t *testing.T) {
	if !EqualSecret("s3cret", "s3cret") || EqualSecret("s3cre", "s3cret") || EqualSecret("", "") {
		t.Fatal("EqualSecret compares wrongly; an empty configured secret must match nothing")
	}
}

func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	s1, created, err := LoadOrCreateSecret(dir, AdminSecretFile)
	if err != nil || !created || len(s1) != 64 {
		t.Fatalf("first call = %q, %v, %v", s1, created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, AdminSecretFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, %v; want 0600", fi.Mode(), err)
	}
	s2, created, err := LoadOrCreateSecret(dir, AdminSecretFile)
	if err != nil || created || s2 != s1 {
		t.Fatalf("second call = %q, %v, %v; want the same secret, not created", s2, created, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateSecret(dir, "empty"); err == nil {
		t.Fatal("an empty secret file was accepted")
	}
}

// TestSignatureNotMalleable: the last base64 character of the 32-byte signature carries 4
// unused bits, so without strict decoding four spellings of one token verify. Every
// spelling but the minted one must be refused.
func TestSignatureNotMalleable(t *testing.T) {
	s := NewSigner([]byte("k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1"))
	tok := s.Mint(Claims{UserID: "alice", DeviceID: "phone", ExpiresAt: 2000})
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	variants := 0
	for i := last &^ 3; i < last&^3+4; i++ { // the characters that differ only in unused bits
		variant := tok[:len(tok)-1] + alphabet[i:i+1]
		_, err := s.Parse(variant, 1000)
		if variant == tok {
			if err != nil {
				t.Fatalf("the minted token: %v", err)
			}
			continue
		}
		variants++
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("variant %q: Parse error = %v, want %v", variant[len(variant)-3:], err, ErrMalformed)
		}
	}
	if variants != 3 {
		t.Fatalf("checked %d variants, want 3", variants)
	}
}
