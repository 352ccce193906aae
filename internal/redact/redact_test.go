package redact_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/redact"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://alice:s3cret@127.0.0.1:4222", "nats://alice:xxxxx@127.0.0.1:4222"},
		{"nats://t0ken@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"tls://alice:s3cret@nats.example:4222", "tls://alice:xxxxx@nats.example:4222"},
		{"nats://a:p1@h1:4222, nats://tok@h2:4222,nats://h3:4222",
			"nats://a:xxxxx@h1:4222, nats://xxxxx@h2:4222,nats://h3:4222"},
		{"nats://a:p@ss@h1:4222", "nats://a:xxxxx@h1:4222"}, // the last @ ends the userinfo
		{"postgres://parley@db:5432/parley", "postgres://parley@db:5432/parley"},
		{"postgres://parley:pw@db:5432/parley?sslmode=verify-full", "postgres://parley:xxxxx@db:5432/parley?sslmode=verify-full"},
		{"postgresql://parley:pw@db/parley", "postgresql://parley:xxxxx@db/parley"},
		{"postgres://parley:pw@h1:5432,h2:5432/parley", "postgres://parley:xxxxx@h1:5432,h2:5432/parley"},
		{"postgres://db/parley?user=u&password=pw&sslmode=require", "postgres://db/parley?user=u&password=xxxxx&sslmode=require"},
		{"postgres://db/parley?sslpassword=k3y", "postgres://db/parley?sslpassword=xxxxx"},
		{"postgres://h1,h2/parley?password=pw", "postgres://h1,h2/parley?password=xxxxx"},
		{"host=db user=parley password=pw sslmode=verify-full", "host=db user=parley password=xxxxx sslmode=verify-full"},
		{"host=db password = 'p w\\' x' dbname=parley", "host=db password = xxxxx dbname=parley"},
		{"password=pw", "password=xxxxx"},
		{"host=db dbname=parley", "host=db dbname=parley"},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := redact.URL(tc.in); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A library error may quote the URL or only its secret, percent-decoded or not: Error
// masks every form, and keeps the error's chain for errors.Is.
func TestError(t *testing.T) {
	const conn = "nats://alice:p%40ss@127.0.0.1:4222"
	err := fmt.Errorf("connect %s (password p@ss, raw p%%40ss): %w", conn, fs.ErrNotExist)
	got := redact.Error(err, conn)
	for _, secret := range []string{"p@ss", "p%40ss"} {
		if strings.Contains(got.Error(), secret) {
			t.Errorf("Error kept %q: %s", secret, got)
		}
	}
	if !strings.Contains(got.Error(), "nats://alice:xxxxx@127.0.0.1:4222") {
		t.Errorf("Error = %q, want the masked URL in it", got)
	}
	if !errors.Is(got, fs.ErrNotExist) {
		t.Errorf("Error lost the chain: %v", got)
	}
	plain := errors.New("nothing secret")
	if redact.Error(plain, conn) != plain {
		t.Errorf("Error wrapped an error that held no secret")
	}
	quoted := redact.Text(`auth failed for 'p w' x`, `host=db password='p w' user=u`)
	if strings.Contains(quoted, "p w") {
		t.Errorf("Text kept the unquoted key=value password: %q", quoted)
	}
}
