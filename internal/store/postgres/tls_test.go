package postgres

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

func TestTLSDefault(t *testing.T) {
	none := func(string) string { return "" }
	tests := []struct {
		name, in, want, chosen string
		env                    func(string) string
	}{
		{"loopback URL", "postgres://u@127.0.0.1:5432/db", "postgres://u@127.0.0.1:5432/db?sslmode=disable", "disable", none},
		{"localhost URL with query", "postgres://u@localhost/db?search_path=s", "postgres://u@localhost/db?search_path=s&sslmode=disable", "disable", none},
		{"IPv6 loopback", "postgres://u@[::1]:5432/db", "postgres://u@[::1]:5432/db?sslmode=disable", "disable", none},
		{"unix socket", "postgres://u@/db?host=/var/run/postgresql", "postgres://u@/db?host=/var/run/postgresql&sslmode=disable", "disable", none},
		{"remote URL", "postgres://u:pw@db.example:5432/db", "postgres://u:pw@db.example:5432/db?sslmode=verify-full", "verify-full", none},
		{"remote among hosts", "postgres://u@127.0.0.1:5432,db.example:5432/db", "postgres://u@127.0.0.1:5432,db.example:5432/db?sslmode=verify-full", "verify-full", none},
		{"loopback with a CA", "postgres://u@127.0.0.1/db?sslrootcert=/ca.pem", "postgres://u@127.0.0.1/db?sslrootcert=/ca.pem&sslmode=verify-full", "verify-full", none},
		{"chosen in URL", "postgres://u@db.example/db?sslmode=require", "postgres://u@db.example/db?sslmode=require", "", none},
		{"ssl=true alias", "postgres://u@db.example/db?ssl=true", "postgres://u@db.example/db?ssl=true", "", none},
		{"chosen by PGSSLMODE", "postgres://u@db.example/db", "postgres://u@db.example/db", "", func(k string) string {
			if k == "PGSSLMODE" {
				return "require"
			}
			return ""
		}},
		{"key=value remote", "host=db.example user=u dbname=db", "host=db.example user=u dbname=db sslmode=verify-full", "verify-full", none},
		{"key=value loopback", "host=127.0.0.1 user=u", "host=127.0.0.1 user=u sslmode=disable", "disable", none},
		{"key=value chosen", "host=db.example sslmode = prefer", "host=db.example sslmode = prefer", "", none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, chosen, err := withTLSDefault(tc.in, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || chosen != tc.chosen {
				t.Errorf("withTLSDefault(%q) = %q, %q; want %q, %q", tc.in, got, chosen, tc.want, tc.chosen)
			}
		})
	}
}

// A database on another host, named by a URL without sslmode, gets verify-full: against a
// server (or a man in the middle) that declines TLS, Open fails instead of going on in
// plaintext, as pgx's default (prefer) does, password and all.
func TestTLSDefaultRefusesPlaintextToRemoteHost(t *testing.T) {
	ip := nonLoopbackIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	defer ln.Close()
	var (
		mu   sync.Mutex
		seen []string
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var head [8]byte
				if _, err := io.ReadFull(c, head[:]); err != nil {
					return
				}
				what := "plaintext startup"
				if binary.BigEndian.Uint32(head[4:]) == 80877103 { // SSLRequest
					what = "TLS request"
				}
				mu.Lock()
				seen = append(seen, what)
				mu.Unlock()
				if what == "TLS request" {
					_, _ = c.Write([]byte{'N'}) // this server speaks no TLS
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "postgres://parley:pg-s3cret@" + ln.Addr().String() + "/parley"
	st, err := Open(ctx, Options{URL: url})
	if err == nil {
		st.Close()
		t.Fatal("Open succeeded against a server without TLS")
	}
	t.Logf("Open: %v", err)
	if !strings.Contains(err.Error(), "sslmode=verify-full") {
		t.Errorf("error %q does not say which sslmode was chosen", err)
	}
	if strings.Contains(err.Error(), "pg-s3cret") {
		t.Errorf("error %q shows the password", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s == "plaintext startup" {
			t.Fatalf("the client fell back to plaintext (messages seen: %v)", seen)
		}
	}
	if len(seen) == 0 {
		t.Fatal("the server saw no connection")
	}
}

// nonLoopbackIP returns an IPv4 address of this machine that is not loopback, or skips.
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address")
	return ""
}

// The test database is on a loopback address: without sslmode, Open connects (plaintext,
// LocalSSLMode) whatever TLS the server offers.
func TestTLSDefaultLoopbackConnects(t *testing.T) {
	url := pgtest.SchemaURL(t, t.Name())
	url = strings.NewReplacer("sslmode=disable&", "", "&sslmode=disable", "", "?sslmode=disable", "").Replace(url)
	if strings.Contains(url, "sslmode") {
		t.Fatalf("test URL %q still names an sslmode", url)
	}
	st, err := Open(t.Context(), Options{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	st.Close()
}

// No error of Open shows the URL's password, whatever failed.
func TestOpenErrorHidesPassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, url := range []string{
		"postgres://parley:pg-s3cret@" + addr + "/parley",
		"postgres://parley:pg-s3cret@" + addr + "/parley?sslmode=disable&connect_timeout=x",
		"host=127.0.0.1 port=" + strings.Split(addr, ":")[1] + " user=parley password='pg-s3cret' sslmode=disable",
		"postgres://parley@" + addr + "/parley?password=pg-s3cret",
	} {
		st, err := Open(t.Context(), Options{URL: url})
		if err == nil {
			st.Close()
			t.Fatalf("Open(%s) succeeded", url)
		}
		if strings.Contains(err.Error(), "pg-s3cret") {
			t.Errorf("Open's error shows the password: %v", err)
		}
	}
}
