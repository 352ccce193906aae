package postgres

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// TLS modes Parley chooses for a connection string that names none (withTLSDefault).
const (
	// LocalSSLMode is for a database reached over a loopback address or a unix socket:
	// its traffic never leaves the machine, so TLS would protect nothing.
	LocalSSLMode = "disable"
	// RemoteSSLMode is for any other host: encrypted, with the server's certificate
	// checked against the system's roots (or sslrootcert) and its host name. libpq's and
	// pgx's own default, prefer, neither verifies the server nor refuses a server (or a
	// man in the middle) that declines TLS: it silently goes plaintext.
	RemoteSSLMode = "verify-full"
)

// withTLSDefault returns connString with an sslmode added when it names none (and
// $PGSSLMODE, which pgx reads, is unset): LocalSSLMode when every host it names is a
// loopback address, "localhost" or a unix socket and it asks for no certificate (no
// sslrootcert, sslcert), RemoteSSLMode otherwise. chosen is the mode added, "" when the
// operator chose one.
func withTLSDefault(connString string, getenv func(string) string) (out, chosen string, err error) {
	if getenv("PGSSLMODE") != "" {
		return connString, "", nil
	}
	isURL := strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://")
	has := func(key string) bool { return hasKey(connString, key) }
	if isURL {
		// Not url.Parse: it refuses the host lists ("h1:5432,h2:5432") that pgconn takes.
		_, rawQuery, _ := strings.Cut(connString, "?")
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return "", "", fmt.Errorf("postgres: parse URL query: %w", err)
		}
		has = q.Has
	}
	if has("sslmode") || (isURL && has("ssl")) {
		return connString, "", nil
	}
	chosen = RemoteSSLMode
	if !has("sslrootcert") && !has("sslcert") { // a certificate asks for TLS wherever the host is
		cfg, err := pgconn.ParseConfig(connString)
		if err != nil {
			return "", "", err // pgconn masks the password in its error
		}
		chosen = LocalSSLMode
		for _, c := range append([]*pgconn.FallbackConfig{{Host: cfg.Host}}, cfg.Fallbacks...) {
			if !localHost(c.Host) {
				chosen = RemoteSSLMode
			}
		}
	}
	switch {
	case !isURL:
		return connString + " sslmode=" + chosen, chosen, nil
	case strings.Contains(connString, "?"):
		return connString + "&sslmode=" + chosen, chosen, nil
	default:
		return connString + "?sslmode=" + chosen, chosen, nil
	}
}

// localHost reports whether a host pgconn resolved (a name, an address or a unix socket's
// directory) stays on this machine.
func localHost(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hasKey reports whether a key=value connection string sets key.
func hasKey(connString, key string) bool {
	return regexp.MustCompile(`(?i)(^|\s)` + regexp.QuoteMeta(key) + `\s*=`).MatchString(connString)
}
