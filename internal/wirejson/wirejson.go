// Package wirejson reads JSON laid out exactly as the Parley server writes it (keys in a known
// order, no white space, ids that need no escaping) without reflection, for the decoders that
// run once per event on a catch-up of thousands: a client's push frames and message payloads.
//
// Each function takes the input from its start and returns what follows; ok is false as soon
// as the input differs in any way from the simple form it reads. Callers then decode the whole
// input with encoding/json instead, so that a fast path never decides differently from it:
// it only accepts what encoding/json would decode to the same values.
package wirejson

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Prefix cuts p from the start of b.
func Prefix(b []byte, p string) (rest []byte, ok bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}

// Int cuts a JSON integer that fits an int64: an optional minus and digits, without leading
// zeros, fraction or exponent.
func Int(b []byte) (n int64, rest []byte, ok bool) {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	switch {
	case i == start, b[start] == '0' && i > start+1:
		return 0, b, false
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, b, false
	}
	n, err := strconv.ParseInt(string(b[:i]), 10, 64) // does not allocate
	if err != nil {
		return 0, b, false
	}
	return n, b[i:], true
}

// Bool cuts true or false.
func Bool(b []byte) (v bool, rest []byte, ok bool) {
	if rest, ok := Prefix(b, "true"); ok {
		return true, rest, true
	}
	if rest, ok := Prefix(b, "false"); ok {
		return false, rest, true
	}
	return false, b, false
}

// String cuts a JSON string without escape sequences whose bytes are valid UTF-8, and
// returns its content. known, if not empty, is returned instead of a new string when the
// content equals it (an event type, say), which saves the allocation.
func String(b []byte, known string) (s string, rest []byte, ok bool) {
	raw, rest, ok := stringBytes(b)
	if !ok {
		return "", b, false
	}
	if known != "" && string(raw) == known {
		return known, rest, true
	}
	return string(raw), rest, true
}

// stringBytes is String without the copy: the content aliases b.
func stringBytes(b []byte) (raw, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	ascii := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			raw = b[1:i]
			if !ascii && !utf8.Valid(raw) {
				return nil, b, false // encoding/json would replace the invalid bytes
			}
			return raw, b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, b, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, b, false
}

// Value cuts one complete JSON value, which must be valid (and, as jsontext checks, hold
// valid UTF-8 and no duplicate names), and returns its bytes, aliasing b.
func Value(b []byte) (v, rest []byte, ok bool) {
	n := valueLen(b)
	if n == 0 || !jsontext.Value(b[:n]).IsValid() {
		return nil, b, false
	}
	return b[:n], b[n:], true
}

// valueLen returns the length of the JSON value at the start of b, found by matching
// brackets and quotes only (Value validates it), or 0 if b does not start with one.
func valueLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '"':
		if n := stringEnd(b, 0); n > 0 {
			return n
		}
		return 0
	case '{', '[':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				n := stringEnd(b, i)
				if n == 0 {
					return 0
				}
				i = n - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return 0
	}
	// A number or literal: up to the next delimiter.
	if i := bytes.IndexAny(b, ",}] \t\r\n"); i >= 0 {
		return i
	}
	return len(b)
}

// stringEnd returns the index just past the string that starts at b[i] ('"'), or 0 if it
// does not end.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return 0
}

// StringMap cuts null (a nil map) or an object whose values are all strings (String's simple
// strings), as encoding/json decodes it into a nil map[string]string: a new map, the last of
// duplicate names winning.
func StringMap(b []byte) (m map[string]string, rest []byte, ok bool) {
	if rest, ok := Prefix(b, "null"); ok {
		return nil, rest, true
	}
	rest, ok = Prefix(b, "{")
	if !ok {
		return nil, b, false
	}
	m = map[string]string{}
	if rest, ok := Prefix(rest, "}"); ok {
		return m, rest, true
	}
	for {
		var k, v string
		if k, rest, ok = String(rest, ""); !ok {
			return nil, b, false
		}
		if rest, ok = Prefix(rest, ":"); !ok {
			return nil, b, false
		}
		if v, rest, ok = String(rest, ""); !ok {
			return nil, b, false
		}
		m[k] = v
		if r, ok := Prefix(rest, "}"); ok {
			return m, r, true
		}
		if rest, ok = Prefix(rest, ","); !ok {
			return nil, b, false
		}
	}
}
