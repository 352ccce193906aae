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
	dec := strictDecoders.Get().(*jsontext.Decoder)
	defer func() {
		dec.Reset(http.NoBody) // let go of data before the decoder waits in the pool
		strictDecoders.Put(dec)
	}()
	dec.Reset(bytes.NewBuffer(data))
	_, err := dec.ReadToken() // the body's '{'
	for err == nil && dec.StackDepth() > 0 {
		if dec.StackDepth() == 1 {
			err = checkMember(dec, t)
		} else {
			err = checkNested(dec)
		}
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

// strictDecoders recycles checkStrict's decoders. The check runs on every request and frame
// (twice per WebSocket frame: envelope, then params); a fresh decoder and its sets of names
// cost more than the check itself.
var strictDecoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// checkMember reads one member of the body object (or its closing '}'): the name, then the
// value if it is a scalar or a list field, or else the value's opening token: checkNested
// walks the rest.
func checkMember(dec *jsontext.Decoder, t reflect.Type) error {
	if dec.PeekKind() == '}' {
		_, err := dec.ReadToken()
		return err
	}
	name, err := dec.ReadValue()
	if err != nil {
		return err
	}
	field, err := knownField(t, name)
	if err != nil {
		return err
	}
	switch kind := dec.PeekKind(); {
	case kind == '[' && field.Type != nil && isList(field.Type):
		return checkList(dec, field.Name)
	case kind == '{' || kind == '[':
		return checkNested(dec) // enters the value: depth 2
	case kind == '0':
		v, err := dec.ReadValue()
		if err == nil && field.Type != nil && !safeInteger(v) {
			return invalidf("field %q is beyond 2^53-1 (%d), the largest integer every JSON client holds exactly", field.Name, protocol.MaxSafeInteger)
		}
		return err
	}
	_, err = dec.ReadValue()
	return err
}

// checkList reads the list value of field, refusing it as soon as it has more than
// protocol.MaxRequestListLen entries: the rest of it is never read.
func checkList(dec *jsontext.Decoder, field string) error {
	if _, err := dec.ReadToken(); err != nil { // '['
		return err
	}
	for n := 0; dec.PeekKind() != ']'; n++ {
		if n == protocol.MaxRequestListLen {
			return invalidf("%s has more than %d entries", field, protocol.MaxRequestListLen)
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
// selects no field (it is ignored).
type jsonField struct {
	Name string
	Type reflect.Type
}

// knownField returns the field of struct type t that the quoted JSON name selects, and an
// error if the name differs from a field's name only in case: encoding/json would silently
// use it for that field.
func knownField(t reflect.Type, quoted jsontext.Value) (jsonField, error) {
	name := []byte(quoted[1 : len(quoted)-1])
	if bytes.IndexByte(name, '\\') >= 0 {
		name, _ = jsontext.AppendUnquote(nil, quoted) // the decoder has validated it
	}
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
		fs = append(fs, jsonField{name, f.Type})
	}
	jsonFields.Store(t, fs)
	return fs
}

// isList reports whether a field of type t holds a list (json.RawMessage is a slice too, but
// holds any JSON value).
func isList(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t != reflect.TypeFor[json.RawMessage]()
}

// safeInteger reports whether the JSON number v is within ±(2^53-1). Fractions are left to
// encoding/json, which refuses them for integer fields.
func safeInteger(v jsontext.Value) bool {
	f, err := strconv.ParseFloat(string(v), 64)
	return err == nil && math.Abs(f) <= protocol.MaxSafeInteger
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
