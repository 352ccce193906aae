package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// checkStrict refuses the JSON that encoding/json accepts but a careful client never sends
// and other clients cannot read back (PROTOCOL section 1). encoding/json stores invalid UTF-8
// as it is, which browsers then refuse in a WebSocket text frame and close the connection;
// it lets the last of two duplicate keys win, so the server and a proxy or another decoder
// may see different requests; it matches field names without regard to case ("Conv_ID"
// sets conv_id); it accepts nesting 10,000 deep, which costs every reader of the message;
// it accepts integers above 2^53, which a JavaScript client cannot hold; and it builds a list
// of any length, which the server then works through. t is the struct type data is decoded
// into: its JSON field names are the known top-level keys.
//
// The jsontext decoder (the tokenizer of Go's encoding/json/v2) refuses invalid UTF-8,
// invalid \u escapes and duplicate keys at any depth by default; the walk adds the depth,
// case, integer and list rules. A broken rule is an error wrapping chat.ErrInvalid; malformed
// JSON is returned as jsontext's error, for decodeObject to word.
func checkStrict(data []byte, t reflect.Type) error {
	w := strictWalks.Get().(*strictWalk)
	defer w.release()
	return w.verdict(data, t, w.walk(data, t))
}

// strictWalk is one walk of checkStrict over a JSON object: the jsontext decoder, and the
// top-level members it met. The rules that depend on the request type (field names, their
// integers) are applied to the members after the walk, by checkMembers, so that a WebSocket
// frame can be walked once before its op says which type its params have.
type strictWalk struct {
	dec     jsontext.Decoder
	members []member
}

// member is one top-level member of the object, as far as the walk read it.
type member struct {
	name  []byte        // unquoted
	kind  jsontext.Kind // the value's kind; 0 if the walk stopped before the value
	value []byte        // the value's bytes in the data, once read whole (else nil)
}

// strictWalks recycles checkStrict's walks. The check runs on every request and frame; a
// fresh decoder and its sets of names cost more than the check itself.
var strictWalks = sync.Pool{New: func() any { return new(strictWalk) }}

// release lets go of the data before the walk waits in the pool.
func (w *strictWalk) release() {
	w.dec.Reset(http.NoBody)
	clear(w.members)
	w.members = w.members[:0]
	strictWalks.Put(w)
}

// walk reads the object data and records its top-level members. It stops at the first
// syntax error and at the depth rule; with t not nil it also enforces the list rule on t's
// list fields as it goes (so that the rest of a list too long is never read). t nil means
// the type is not known yet: lists are then walked like any value.
func (w *strictWalk) walk(data []byte, t reflect.Type) error {
	dec := &w.dec
	w.members = w.members[:0]
	dec.Reset(bytes.NewBuffer(data))
	tok, err := dec.ReadToken()
	if err == nil && tok.Kind() != '{' {
		return invalidf("body must be a JSON object")
	}
	start := int64(0) // where the current member's object or array value begins
	for err == nil && dec.StackDepth() > 0 {
		if dec.StackDepth() > 1 {
			err = checkNested(dec)
			if err == nil && dec.StackDepth() == 1 { // the member's object or array ended
				w.members[len(w.members)-1].value = data[start:dec.InputOffset()]
			}
			continue
		}
		start, err = w.member(data, t)
	}
	return err
}

// member reads one member of the object (or its closing '}'): the name, then the value if
// it is a scalar or a list field of t, or else the value's opening token (walk reads the
// rest). It returns the offset at which an object or array value begins.
func (w *strictWalk) member(data []byte, t reflect.Type) (int64, error) {
	dec := &w.dec
	if dec.PeekKind() == '}' {
		_, err := dec.ReadToken()
		return 0, err
	}
	quoted, err := dec.ReadValue()
	if err != nil {
		return 0, err
	}
	name := span(data, dec, len(quoted))
	name = name[1 : len(name)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		name, _ = jsontext.AppendUnquote(nil, quoted) // the decoder has validated it
	}
	w.members = append(w.members, member{name: name, kind: dec.PeekKind()})
	m := &w.members[len(w.members)-1]
	var field jsonField
	if m.kind == '[' && t != nil {
		field = fieldOf(t, name)
	}
	switch {
	case isList(field.Type):
		return 0, checkList(dec, field)
	case m.kind == '{' || m.kind == '[':
		err := checkNested(dec) // enters the value: depth 2
		return dec.InputOffset() - 1, err
	}
	v, err := dec.ReadValue()
	if err == nil {
		m.value = span(data, dec, len(v))
	}
	return 0, err
}

// span returns the n bytes of data that dec has just read.
func span(data []byte, dec *jsontext.Decoder, n int) []byte {
	end := dec.InputOffset()
	return data[end-int64(n) : end]
}

// verdict returns checkStrict's answer for data after a walk that ended with err: the first
// member that breaks a rule of t (which the walk, stopping there, would have met first),
// else err, worded when it is a rule of checkStrict's (UTF-8, duplicate keys).
func (w *strictWalk) verdict(data []byte, t reflect.Type, err error) error {
	if rule := checkMembers(w.members, t); rule != nil {
		return rule
	}
	var se *jsontext.SyntacticError
	switch {
	case err == nil || errors.Is(err, chat.ErrInvalid):
		return err
	case !utf8.Valid(data):
		// Only now: a walk that ends well has read every byte of the object as valid UTF-8,
		// and one that stops early (a list too long) must not have read the rest.
		return invalidf("body is not valid UTF-8 (first bad byte at offset %d)", invalidUTF8Offset(data))
	case errors.As(err, &se) && se.Err == jsontext.ErrDuplicateName:
		return describeDuplicate(se.JSONPointer)
	}
	return err
}

// checkMembers applies the rules of struct type t to the members a walk met, in order: no
// key that differs from a field's name only in case, the fields' integers within
// ±(2^53-1), and no NUL character in any string or key of a field's value.
func checkMembers(members []member, t reflect.Type) error {
	for _, m := range members {
		field, err := knownField(t, m.name)
		if err != nil {
			return err
		}
		if m.kind == '0' && m.value != nil && field.Type != nil && !safeInteger(m.value) {
			return invalidf("field %q is beyond 2^53-1 (%d), the largest integer every JSON client holds exactly", field.Name, protocol.MaxSafeInteger)
		}
		if field.Type != nil && holdsNUL(m.value) {
			return invalidf("field %q holds a NUL character (\\u0000), which no string may hold", field.Name)
		}
	}
	return nil
}

// checkList reads the list value of field, refusing it as soon as it has more than
// field.MaxLen entries: the rest of it is never read.
func checkList(dec *jsontext.Decoder, field jsonField) error {
	if _, err := dec.ReadToken(); err != nil { // '['
		return err
	}
	for n := 0; dec.PeekKind() != ']'; n++ {
		if n == field.MaxLen {
			return invalidf("%s has more than %d entries", field.Name, field.MaxLen)
		}
		if _, err := dec.ReadValue(); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken() // ']'
	return err
}

// checkNested reads one token inside a top-level value and enforces the depth limit.
func checkNested(dec *jsontext.Decoder) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if k := tok.Kind(); (k == '{' || k == '[') && dec.StackDepth() > protocol.MaxJSONDepth {
		return invalidf("JSON nested deeper than %d levels (at offset %d)", protocol.MaxJSONDepth, dec.InputOffset())
	}
	return nil
}

// jsonField is a field of a request struct as JSON names it. Type is nil for a key that
// selects no field (it is ignored). MaxLen is the most entries a list field may have: its
// tag maxlen, else protocol.MaxRequestListLen.
type jsonField struct {
	Name   string
	Type   reflect.Type
	MaxLen int
}

// knownField returns the field of struct type t that the JSON name selects, and an
// error if the name differs from a field's name only in case: encoding/json would silently
// use it for that field.
func knownField(t reflect.Type, name []byte) (jsonField, error) {
	for _, f := range jsonFieldsOf(t) {
		if string(name) == f.Name {
			return f, nil
		}
		if bytes.EqualFold(name, []byte(f.Name)) {
			return jsonField{}, invalidf("unknown key %q: field names are case-sensitive (did you mean %q?)", name, f.Name)
		}
	}
	return jsonField{}, nil
}

// fieldOf returns the field of struct type t that name selects (Type nil if none).
func fieldOf(t reflect.Type, name []byte) jsonField {
	f, _ := knownField(t, name)
	return f
}

// jsonFields caches jsonFieldsOf: parsing struct tags for every key of every request cost
// more than the rest of the check. It maps a reflect.Type to its []jsonField.
var jsonFields sync.Map

// jsonFieldsOf returns the fields of struct type t as encoding/json names them.
func jsonFieldsOf(t reflect.Type) []jsonField {
	if fs, ok := jsonFields.Load(t); ok {
		return fs.([]jsonField)
	}
	var fs []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "":
			name = f.Name
		}
		maxLen := protocol.MaxRequestListLen
		if n, err := strconv.Atoi(f.Tag.Get("maxlen")); err == nil && n >= 0 {
			maxLen = min(n, maxLen)
		}
		fs = append(fs, jsonField{name, f.Type, maxLen})
	}
	jsonFields.Store(t, fs)
	return fs
}

// hasListMember reports whether one of members is a list field of struct type t: only
// then does the list rule, which a walk without t did not apply, have anything to check.
func hasListMember(members []member, t reflect.Type) bool {
	for _, m := range members {
		if m.kind == '[' && isList(fieldOf(t, m.name).Type) {
			return true
		}
	}
	return false
}

// isList reports whether a field of type t (nil for no field) holds a list (json.RawMessage is a slice too, but
// holds any JSON value).
func isList(t reflect.Type) bool {
	return t != nil && t.Kind() == reflect.Slice && t != reflect.TypeFor[json.RawMessage]()
}

// safeInteger reports whether the JSON number v is within ±(2^53-1). Fractions are left to
// encoding/json, which refuses them for integer fields.
func safeInteger(v jsontext.Value) bool {
	f, err := strconv.ParseFloat(string(v), 64)
	return err == nil && math.Abs(f) <= protocol.MaxSafeInteger
}

// holdsNUL reports whether the JSON value v, which the walk has read whole, has a NUL
// character in a string or a key. The only way one gets there is the escape \u0000 (a raw
// NUL byte is no JSON); it decodes to a byte that PostgreSQL's text refuses and the
// embedded engines keep, and that C clients take for the end of the string. An escape is a
// NUL unless its backslash is itself escaped, that is preceded by an odd run of them.
func holdsNUL(v []byte) bool {
	for {
		i := bytes.Index(v, []byte(`\u0000`))
		if i < 0 {
			return false
		}
		run := 0
		for j := i - 1; j >= 0 && v[j] == '\\'; j-- {
			run++
		}
		if run%2 == 0 {
			return true
		}
		v = v[i+1:]
	}
}

// describeDuplicate words a duplicate key found at ptr.
func describeDuplicate(ptr jsontext.Pointer) error {
	if parent := ptr.Parent(); parent != "" {
		return invalidf("duplicate key %q in %q", ptr.LastToken(), parent)
	}
	return invalidf("duplicate key %q", ptr.LastToken())
}

// invalidUTF8Offset returns the offset of the first byte of data that is not valid UTF-8.
func invalidUTF8Offset(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(data)
}
