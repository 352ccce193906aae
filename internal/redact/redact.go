// Package redact hides the secrets of connection strings (NATS and PostgreSQL URLs, and
// PostgreSQL key=value strings) before they reach a log, a response or an error message.
// Operators put passwords and tokens in those strings, and whatever prints one (a start-up
// log line, an error wrapping the URL it failed on) would otherwise hand the secret to
// anyone who reads the logs.
//
// URL is for a string the caller prints itself; Error is for an error from a library that
// may have copied the string, or only its secret, into its message.
package redact

import (
	"net/url"
	"sort"
	"strings"
)

// Mask is what replaces a secret.
const Mask = "xxxxx"

// URL returns s with every password and token replaced by Mask. s may be:
//   - a URL with userinfo ("nats://user:pass@host", "postgres://user:pass@host/db"): the
//     password goes; a lone userinfo is a token for any scheme but postgres and
//     postgresql, where it is the user name and stays ("nats://xxxxx@host");
//   - a comma-separated list of those (NATS's server list, PostgreSQL's hosts);
//   - a URL with the query parameters password= or sslpassword= (PostgreSQL takes both);
//   - a PostgreSQL key=value string ("host=db password='s e' user=u").
//
// Anything else comes back unchanged, so it is safe to call on any connection string.
func URL(s string) string {
	spans := secretSpans(s)
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.from])
		b.WriteString(Mask)
		last = sp.to
	}
	b.WriteString(s[last:])
	return b.String()
}

// Secrets returns the secrets (passwords, tokens) that URL masks in s, each also in its
// decoded form (percent-encoding, or the quoting of a key=value string), longest first:
// the strings Text looks for in a message that may have copied one alone.
func Secrets(s string) []string {
	var out []string
	for _, sp := range secretSpans(s) {
		v := s[sp.from:sp.to]
		if v == "" {
			continue
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			out = append(out, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v[1:len(v)-1]))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Text returns text with each connection string of conns replaced by its masked form
// (URL), and then every secret of them (Secrets) that is still there by Mask.
func Text(text string, conns ...string) string {
	for _, c := range conns {
		if c == "" {
			continue
		}
		text = strings.ReplaceAll(text, c, URL(c))
		for _, secret := range Secrets(c) {
			text = strings.ReplaceAll(text, secret, Mask)
		}
	}
	return text
}

// Error returns err with the secrets of conns masked in its message (see Text), or err
// itself when its message holds none. errors.Is and errors.As still see err's chain.
func Error(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	msg := Text(err.Error(), conns...)
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

// redacted is an error whose message is another's, masked.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// span is the byte range [from, to) of a secret in a connection string.
type span struct{ from, to int }

// secretSpans returns where the secrets of s are, in order.
func secretSpans(s string) []span {
	if !strings.Contains(s, "://") {
		return keyValueSpans(s)
	}
	var spans []span
	start := 0
	for _, part := range strings.SplitAfter(s, ",") {
		for _, sp := range urlSpans(strings.TrimSuffix(part, ",")) {
			spans = append(spans, span{start + sp.from, start + sp.to})
		}
		start += len(part)
	}
	return spans
}

// urlSpans returns the secrets of one URL of a list: the password of its userinfo (or the
// whole userinfo, a token, but for PostgreSQL, where it is a user name), and the values of
// its password and sslpassword query parameters. A part without a scheme (the second host
// of "postgres://u:p@h1,h2/db?password=x") may still carry the query.
func urlSpans(p string) []span {
	var spans []span
	if i := strings.Index(p, "://"); i >= 0 {
		scheme := strings.ToLower(strings.TrimSpace(p[:i]))
		hostStart := i + 3
		end := strings.IndexAny(p[hostStart:], "/?#")
		if end < 0 {
			end = len(p) - hostStart
		}
		if at := strings.LastIndex(p[hostStart:hostStart+end], "@"); at >= 0 {
			info := p[hostStart : hostStart+at]
			if colon := strings.Index(info, ":"); colon >= 0 {
				spans = append(spans, span{hostStart + colon + 1, hostStart + at})
			} else if scheme != "postgres" && scheme != "postgresql" {
				spans = append(spans, span{hostStart, hostStart + at})
			}
		}
	}
	q := strings.Index(p, "?")
	if q < 0 {
		return spans
	}
	pos := q + 1
	query := p[pos:]
	if h := strings.Index(query, "#"); h >= 0 {
		query = query[:h]
	}
	for _, kv := range strings.SplitAfter(query, "&") {
		pair := strings.TrimSuffix(kv, "&")
		if key, _, ok := strings.Cut(pair, "="); ok && isPasswordKey(key) {
			spans = append(spans, span{pos + len(key) + 1, pos + len(pair)})
		}
		pos += len(kv)
	}
	return spans
}

// isPasswordKey reports whether a PostgreSQL parameter holds a secret.
func isPasswordKey(key string) bool {
	key = strings.ToLower(strings.TrimSpace(key))
	return key == "password" || key == "sslpassword"
}

// keyValueSpans returns the values of password and sslpassword in a PostgreSQL key=value
// string: "key = value" pairs separated by spaces, a value bare or single-quoted with
// backslash escapes.
func keyValueSpans(s string) []span {
	var spans []span
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[keyStart:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			if i == keyStart {
				i++ // not a key: step over it
			}
			continue
		}
		i++ // '='
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		valStart := i
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			i = min(i+1, len(s)) // the closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				i++
			}
		}
		if isPasswordKey(key) && i > valStart {
			spans = append(spans, span{valStart, i})
		}
	}
	return spans
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
