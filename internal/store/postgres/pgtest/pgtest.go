// Package pgtest gives tests a PostgreSQL database of their own, or skips them with the
// command that starts one. Tests never share tables: each gets a schema, named for it and
// dropped when it ends.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that points the tests at a PostgreSQL database. Without it they
// use DefaultURL, the database .ci/run creates on the local server.
const EnvURL = "PARLEY_TEST_POSTGRES_URL"

// DefaultURL is the test database on a local server with trust authentication, as the
// development machines and CI have it.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/parley_test?sslmode=disable"

// StartCommand is what the skip message suggests.
const StartCommand = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

var (
	once    sync.Once
	baseURL string
	skipWhy string
)

// URL returns the test database's connection string, creating the database if the server
// has none of that name, or skips t when no server answers.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { baseURL, skipWhy = find() })
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	return baseURL
}

func find() (string, string) {
	raw := os.Getenv(EnvURL)
	if raw == "" {
		raw = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err == nil {
		_ = conn.Close(ctx)
		return raw, ""
	}
	if os.Getenv(EnvURL) != "" {
		return "", "PostgreSQL at $" + EnvURL + " is unreachable: " + err.Error()
	}
	// The server may be there without the database: create it from the maintenance one.
	u, perr := url.Parse(raw)
	if perr != nil {
		return "", perr.Error()
	}
	db := u.Path[1:]
	u.Path = "/postgres"
	admin, err2 := pgx.Connect(ctx, u.String())
	if err2 != nil {
		return "", "PostgreSQL tests skipped: no server at 127.0.0.1:5432 (" + err2.Error() +
			"); start one with `" + StartCommand + "` or set $" + EnvURL
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()); err != nil {
		if conn, err := pgx.Connect(ctx, raw); err == nil { // created meanwhile by another package's tests
			_ = conn.Close(ctx)
			return raw, ""
		}
		return "", "cannot create the test database: " + err.Error()
	}
	return raw, ""
}

var (
	dropMu    sync.Mutex
	dropSched = map[string]bool{}
)

// SchemaURL returns the test database's connection string with search_path set to a
// schema named after key (any string: a directory, a test name), creating the schema if
// it does not exist. The first call for a key in this process drops the schema when t
// ends, so that a test may open the same key again (to reopen a store) and a child
// process given the key reaches the same tables.
func SchemaURL(t testing.TB, key string) string {
	t.Helper()
	base := URL(t)
	sum := sha256.Sum256([]byte(key))
	schema := "t_" + hex.EncodeToString(sum[:10])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	dropMu.Lock()
	first := !dropSched[schema]
	dropSched[schema] = true
	dropMu.Unlock()
	if first {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, base)
			if err != nil {
				t.Errorf("pgtest: drop schema %s: %v", schema, err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
				t.Errorf("pgtest: drop schema %s: %v", schema, err)
			}
		})
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
