package gateway

import (
	"bytes"
	"errors"
	"io"
	"math"
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
// and it accepts integers above 2^53, which a JavaScript client cannot hold. t is the struct
// type data was decoded into: its JSON field names are the known top-level keys.
//
// data has already been decoded by encoding/json, so it is one well-formed JSON object: the
// check runs after it, so that syntax errors keep encoding/json's messages. The jsontext
// decoder (the tokenizer of Go's encoding/json/v2) refuses invalid \u escapes and duplicate
// keys at any depth by default; the walk adds the depth, case and integer rules.
func checkStrict(data []byte, t reflect.Type) error {
	if !utf8.Valid(data) {
		return invalidf("body is not valid UTF-8 (first bad byte at offset %d)", invalidUTF8Offset(data))
	}
	dec := strictDecoders.Get().(*jsontext.Decoder)
	defer strictDecoders.Put(dec)
	dec.Reset(bytes.NewBuffer(data))
	_, err := dec.ReadToken() // the body's '{'
	for err == nil && dec.StackDepth() > 0 {
		if dec.StackDepth() == 1 {
			err = checkMember(dec, t)
		} else {
			err = checkNested(dec)
		}
	}
	if err != nil {
		return describeStrictError(err)
	}
	return nil
}

// strictDecoders recycles checkStrict's decoders. The check runs on every request and frame
// (twice per WebSocket frame: envelope, then params); a fresh decoder and its sets of names
// cost more than the check itself. A Decoder keeps no request data once Reset.
var strictDecoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// checkMember reads one member of the body object (or its closing '}'): the name, and the
// value if it is a scalar, or else the value's opening token: checkNested walks the rest.
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
	switch dec.PeekKind() {
	case '{', '[':
		return checkNested(dec) // enters the value: depth 2
	case '0':
		v, err := dec.ReadValue()
		if err == nil && field != "" && !safeInteger(v) {
			return invalidf("field %q is beyond 2^53-1 (%d), the largest integer every JSON client holds exactly", field, protocol.MaxSafeInteger)
		}
		return err
	}
	_, err = dec.ReadValue()
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

// knownField returns the name of the field of struct type t that the quoted JSON name
// selects, "" if it selects none (it is ignored), and an error if it differs from a field's
// name only in case: encoding/json would silently use it for that field.
func knownField(t reflect.Type, quoted jsontext.Value) (string, error) {
	name := []byte(quoted[1 : len(quoted)-1])
	if bytes.IndexByte(name, '\\') >= 0 {
		name, _ = jsontext.AppendUnquote(nil, quoted) // the decoder has validated it
	}
	for i := range t.NumField() {
		f := t.Field(i)
		fname, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case fname == "-":
			continue
		case fname == "":
			fname = f.Name
		}
		if string(name) == fname {
			return fname, nil
		}
		if bytes.EqualFold(name, []byte(fname)) {
			return "", invalidf("unknown key %q: field names are case-sensitive (did you mean %q?)", name, fname)
		}
	}
	return "", nil
}

// safeInteger reports whether the JSON number v is within ±(2^53-1). Fractions are left to
// encoding/json, which refuses them for integer fields.
func safeInteger(v jsontext.Value) bool {
	f, err := strconv.ParseFloat(string(v), 64)
	return err == nil && math.Abs(f) <= protocol.MaxSafeInteger
}

// describeStrictError words an error of checkStrict's walk for the client.
func describeStrictError(err error) error {
	var se *jsontext.SyntacticError
	switch {
	case errors.Is(err, chat.ErrInvalid):
		return err
	case !errors.As(err, &se):
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return invalidf("malformed JSON: unexpected end of input")
		}
		return invalidf("malformed JSON: %v", err)
	case se.Err == jsontext.ErrDuplicateName:
		if parent := se.JSONPointer.Parent(); parent != "" {
			return invalidf("duplicate key %q in %q", se.JSONPointer.LastToken(), parent)
		}
		return invalidf("duplicate key %q", se.JSONPointer.LastToken())
	}
	return invalidf("malformed JSON: %s", strings.TrimPrefix(se.Error(), "jsontext: "))
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
