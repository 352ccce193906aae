package gateway

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/parleychat/parley/protocol"
)

// wantCode asserts that err maps to code (0: no error).
func wantCode(t *testing.T, err error, code int) {
	t.Helper()
	switch {
	case code == 0 && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case code != 0 && err == nil:
		t.Fatalf("no error, want %d", code)
	case code != 0 && statusOf(err) != code:
		t.Fatalf("error %q maps to %d, want %d", err, statusOf(err), code)
	}
}

func TestDecodeObject(t *testing.T) {
	tests := []struct {
		name, in string
		code     int
		msg      string // a part of the error message
	}{
		{"object", `{"user_id":"a"}`, 0, ""},
		{"leading space", " \n{\"user_id\":\"a\"}", 0, ""},
		{"unknown fields ignored", `{"user_id":"a","x":{"y":[1,2]}}`, 0, ""},
		{"empty", ``, 400, "empty"},
		{"whitespace only", "  \n", 400, "empty"},
		{"array", `[1,2]`, 400, "JSON object"},
		{"string", `"x"`, 400, "JSON object"},
		{"null", `null`, 400, "JSON object"},
		{"truncated", `{"user_id":"a"`, 400, "malformed JSON at byte 14: unexpected end of JSON input"},
		{"trailing object", `{"user_id":"a"}{}`, 400, "malformed JSON at byte 16: invalid character '{' after top-level value"},
		{"trailing garbage", `{"user_id":"a"} x`, 400, "malformed JSON"},
		{"wrong type", `{"user_id":5}`, 400, `"user_id" must be a string`},
		{"not JSON", `hello`, 400, "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v protocol.CreateUserRequest
			err := decodeObject([]byte(tt.in), &v)
			wantCode(t, err, tt.code)
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

// TestDecodeStrict covers checkStrict through the send decoder, whose body has every kind of
// place a client can put bytes: top-level keys and values, content at any depth, and extra.
func TestDecodeStrict(t *testing.T) {
	send := func(rest string) string {
		return `{"conv_id":"c","client_msg_id":"m","content_type":1` + rest + `}`
	}
	nested := func(depth int) string { // content nested to depth levels, the body being 1
		return strings.Repeat(`[`, depth-1) + strings.Repeat(`]`, depth-1)
	}
	tests := []struct {
		name, in string
		code     int
		msg      string // a part of the error message
	}{
		{"plain", send(`,"content":{"text":"héllo ☃ 😀"},"extra":{"k":"v"}`), 0, ""},
		{"escaped non-ASCII", send(`,"content":"\u00e9\ud83d\ude00"`), 0, ""},
		{"invalid UTF-8 in content", send(`,"content":{"text":"a` + "\xff" + `"}`), 400, "not valid UTF-8 (first bad byte at offset"},
		{"invalid UTF-8 in extra", send(`,"content":1,"extra":{"k":"` + "\xc3" + `"}`), 400, "not valid UTF-8"},
		{"invalid UTF-8 in a key", send(`,"content":1,"` + "\xed\xa0\x80" + `":1`), 400, "not valid UTF-8"},
		{"invalid UTF-8 in an unknown field", send(`,"content":1,"pad":"` + "\xfe" + `"`), 400, "not valid UTF-8"},
		{"lone surrogate escape", send(`,"content":"\ud800"`), 400, "malformed JSON"},
		{"duplicate top-level key", send(`,"content":1,"content":2`), 400, `duplicate key "content"`},
		{"duplicate conv_id", send(`,"content":1,"conv_id":"d"`), 400, `duplicate key "conv_id"`},
		{"duplicate key in content", send(`,"content":{"a":{"b":1,"b":2}}`), 400, `duplicate key "b" in "/content/a"`},
		{"duplicate key in extra", send(`,"content":1,"extra":{"k":"1","k":"2"}`), 400, `duplicate key "k" in "/extra"`},
		{"escaped duplicate key", send(`,"content":1,"c\u006fntent":2`), 400, `duplicate key "content"`},
		{"case variant", send(`,"content":1,"Conv_ID":"d"`), 400, `"Conv_ID": field names are case-sensitive (did you mean "conv_id"?)`},
		{"case variant alone", `{"CONV_ID":"c","client_msg_id":"m","content_type":1,"content":1}`, 400, "case-sensitive"},
		{"long s variant", send(`,"content":1,"client_m\u017Fg_id":"n"`), 400, `"client_mſg_id": field names are case-sensitive`},
		{"case in content is data", send(`,"content":{"Text":1,"text":2}`), 0, ""},
		{"depth at limit", send(`,"content":` + nested(protocol.MaxJSONDepth)), 0, ""},
		{"depth over limit", send(`,"content":` + nested(protocol.MaxJSONDepth+1)), 400, "nested deeper than 32"},
		{"depth 9000", send(`,"content":` + nested(9000)), 400, "nested deeper than 32"},
		{"deep unknown field", send(`,"content":1,"pad":` + nested(100)), 400, "nested deeper"},
		{"content_type 2^31-1", `{"conv_id":"c","client_msg_id":"m","content_type":2147483647,"content":1}`, 0, ""},
		{"content_type 2^31", `{"conv_id":"c","client_msg_id":"m","content_type":2147483648,"content":1}`, 400, "content_type must be at most 2147483647"},
		{"content_type 2^53-1", `{"conv_id":"c","client_msg_id":"m","content_type":9007199254740991,"content":1}`, 400, "content_type must be at most 2147483647"},
		{"NUL in content", send(`,"content":{"text":"a\u0000b"}`), 400, `field "content" holds a NUL character`},
		{"NUL in a content key", send(`,"content":{"a\u0000":1}`), 400, `field "content" holds a NUL character`},
		{"NUL in extra", send(`,"content":1,"extra":{"k":"\u0000"}`), 400, `field "extra" holds a NUL character`},
		{"NUL in conv_id", `{"conv_id":"c\u0000","client_msg_id":"m","content_type":1,"content":1}`, 400, `field "conv_id" holds a NUL character`},
		{"raw NUL byte", send(`,"content":"a` + "\x00" + `"`), 400, "malformed JSON"},
		{"escaped backslash before u0000 is text", send(`,"content":"a\\u0000"`), 0, ""},
		{"NUL after an escaped backslash", send(`,"content":"a\\\u0000"`), 400, "NUL character"},
		{"NUL in an unknown field is ignored", send(`,"content":1,"pad":"\u0000"`), 0, ""},
		{"content_type 2^53", `{"conv_id":"c","client_msg_id":"m","content_type":9007199254740992,"content":1}`, 400, `"content_type" is beyond 2^53-1`},
		{"content_type 2^63-1", `{"conv_id":"c","client_msg_id":"m","content_type":9223372036854775807,"content":1}`, 400, "beyond 2^53-1"},
		{"big number in content is data", send(`,"content":{"n":18446744073709551616}`), 0, ""},
		{"big number in an unknown field", send(`,"content":1,"n":18446744073709551616`), 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeSendRequest([]byte(tt.in))
			wantCode(t, err, tt.code)
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		name, in string
		id, op   string
		code     int
	}{
		{"ping", `{"id":"1","op":"ping"}`, "1", "ping", 0},
		{"params beside", `{"id":"a","op":"send","conv_id":"c"}`, "a", "send", 0},
		{"no id", `{"op":"ping"}`, "", "ping", 0},
		{"no op", `{"id":"7"}`, "7", "", 400},
		{"op not a string keeps id", `{"id":"7","op":5}`, "7", "", 400},
		{"id not a string", `{"id":7,"op":"ping"}`, "", "", 400},
		{"not JSON", `ping`, "", "", 400},
		{"array", `[]`, "", "", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeFrame([]byte(tt.in))
			wantCode(t, err, tt.code)
			if f.ID != tt.id || (err == nil && f.Op != tt.op) {
				t.Fatalf("got %+v, want id %q op %q", f, tt.id, tt.op)
			}
		})
	}
}

func TestDecodeSendRequest(t *testing.T) {
	big := strings.Repeat("x", protocol.MaxContentBytes)
	tests := []struct {
		name, in string
		code     int
	}{
		{"text", `{"conv_id":"c1","client_msg_id":"m-1","content_type":1,"content":{"text":"hi"}}`, 0},
		{"extra", `{"conv_id":"c1","client_msg_id":"m_1","content_type":100,"content":"x","extra":{"k":"v"}}`, 0},
		{"content zero is a value", `{"conv_id":"c1","client_msg_id":"m","content_type":1,"content":0}`, 0},
		{"missing content", `{"conv_id":"c1","client_msg_id":"m","content_type":1}`, 400},
		{"null content", `{"conv_id":"c1","client_msg_id":"m","content_type":1,"content":null}`, 400},
		{"content_type 0", `{"conv_id":"c1","client_msg_id":"m","content_type":0,"content":1}`, 400},
		{"content_type missing", `{"conv_id":"c1","client_msg_id":"m","content":1}`, 400},
		{"content_type string", `{"conv_id":"c1","client_msg_id":"m","content_type":"1","content":1}`, 400},
		{"content_type float", `{"conv_id":"c1","client_msg_id":"m","content_type":1.5,"content":1}`, 400},
		{"bad conv_id", `{"conv_id":"c/1","client_msg_id":"m","content_type":1,"content":1}`, 400},
		{"missing conv_id", `{"client_msg_id":"m","content_type":1,"content":1}`, 400},
		{"dot in client_msg_id", `{"conv_id":"c","client_msg_id":"m.1","content_type":1,"content":1}`, 400},
		{"long client_msg_id", `{"conv_id":"c","client_msg_id":"` + strings.Repeat("a", 65) + `","content_type":1,"content":1}`, 400},
		{"extra not strings", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"extra":{"k":1}}`, 400},
		{"content at limit", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":"` + big[:protocol.MaxContentBytes-2] + `"}`, 0},
		{"content over limit", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":"` + big + `"}`, 413},
		{"content plus extra over limit", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":"` + big[:protocol.MaxContentBytes-20] + `","extra":{"key":"0123456789"}}`, 413},
		{"big unknown field is not content", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"pad":"` + big + `"}`, 0},
		{"mentions", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":["bob","a.b@c-d_e"]}`, 0},
		{"mentions empty", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":[]}`, 0},
		{"mentions null", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":null}`, 0},
		{"mentions at limit", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":[` + idList("u", protocol.MaxMentions) + `]}`, 0},
		{"mentions over limit", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":[` + idList("u", protocol.MaxMentions+1) + `]}`, 400},
		{"mentions bad id", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":["bob","no/pe"]}`, 400},
		{"mentions empty id", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":[""]}`, 400},
		{"mentions not strings", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":[1]}`, 400},
		{"mentions not a list", `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":"bob"}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeSendRequest([]byte(tt.in))
			wantCode(t, err, tt.code)
		})
	}
}

func TestDecodePositionRequest(t *testing.T) {
	tests := []struct {
		name, in string
		wantConv bool
		code     int
	}{
		{"http", `{"seq":3}`, false, 0},
		{"zero", `{"seq":0}`, false, 0},
		{"negative", `{"seq":-1}`, false, 400},
		{"missing seq", `{}`, false, 400},
		{"seq string", `{"seq":"3"}`, false, 400},
		{"ws", `{"id":"1","op":"read","conv_id":"c","seq":3}`, true, 0},
		{"ws without conv", `{"id":"1","op":"read","seq":3}`, true, 400},
		{"http malformed conv", `{"conv_id":"a b","seq":3}`, false, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodePositionRequest([]byte(tt.in), tt.wantConv)
			wantCode(t, err, tt.code)
		})
	}
}

func TestDecodeOtherRequests(t *testing.T) {
	tests := []struct {
		name   string
		decode func([]byte) error
		in     string
		code   int
	}{
		{"recall", errOnly(decodeRecallRequest), `{"conv_id":"c","seq":1}`, 0},
		{"recall without seq", errOnly(decodeRecallRequest), `{"conv_id":"c"}`, 400},
		{"sync", errOnly(decodeSyncParams), `{"cursor":0,"limit":10}`, 0},
		{"sync without cursor", errOnly(decodeSyncParams), `{"limit":10}`, 400},
		{"sync negative cursor", errOnly(decodeSyncParams), `{"cursor":-1}`, 400},
		{"sync negative limit", errOnly(decodeSyncParams), `{"cursor":1,"limit":-1}`, 400},
		{"user", errOnly(decodeCreateUserRequest), `{"user_id":"alice@example.com","name":"Alice"}`, 0},
		{"user bad id", errOnly(decodeCreateUserRequest), `{"user_id":"al ice"}`, 400},
		{"token", errOnly(decodeTokenRequest), `{"user_id":"a","device_id":"d1"}`, 0},
		{"token ttl", errOnly(decodeTokenRequest), `{"user_id":"a","device_id":"d1","ttl_seconds":60}`, 0},
		{"token negative ttl", errOnly(decodeTokenRequest), `{"user_id":"a","device_id":"d1","ttl_seconds":-1}`, 400},
		{"token huge ttl", errOnly(decodeTokenRequest), `{"user_id":"a","device_id":"d1","ttl_seconds":9223372036854775807}`, 400},
		{"token no device", errOnly(decodeTokenRequest), `{"user_id":"a"}`, 400},
		{"direct", errOnly(decodeCreateConversationRequest), `{"type":"direct","peer_id":"b"}`, 0},
		{"direct no peer", errOnly(decodeCreateConversationRequest), `{"type":"direct"}`, 400},
		{"group", errOnly(decodeCreateConversationRequest), `{"type":"group","name":"g","members":["a","b"],"read_detail":true}`, 0},
		{"group bad member", errOnly(decodeCreateConversationRequest), `{"type":"group","members":["a",""]}`, 400},
		{"unknown type", errOnly(decodeCreateConversationRequest), `{"type":"channel"}`, 400},
		{"members", errOnly(decodeMembersRequest), `{"add":["a"],"remove":["b"]}`, 0},
		{"members bad", errOnly(decodeMembersRequest), `{"remove":["b b"]}`, 400},
		{"members not array", errOnly(decodeMembersRequest), `{"add":"a"}`, 400},
		{"members at the list limit", errOnly(decodeMembersRequest), `{"add":[` + idList("u", protocol.MaxRequestListLen) + `]}`, 0},
		{"add over the list limit", errOnly(decodeMembersRequest), `{"add":[` + idList("u", protocol.MaxRequestListLen+1) + `]}`, 400},
		{"remove over the list limit", errOnly(decodeMembersRequest), `{"remove":[` + idList("u", protocol.MaxRequestListLen+1) + `]}`, 400},
		{"repeats count toward the limit", errOnly(decodeMembersRequest), `{"add":[` + strings.Repeat(`"u",`, protocol.MaxRequestListLen) + `"u"]}`, 400},
		{"group over the list limit", errOnly(decodeCreateConversationRequest), `{"type":"group","members":[` + idList("u", protocol.MaxRequestListLen+1) + `]}`, 400},
		{"rename", errOnly(decodeRenameRequest), `{"name":""}`, 0},
		{"rename missing", errOnly(decodeRenameRequest), `{}`, 400},
		{"retention", errOnly(decodeRenameRequest), `{"retention_seconds":3600}`, 0},
		{"retention cleared, with a name", errOnly(decodeRenameRequest), `{"name":"n","retention_seconds":0}`, 0},
		{"retention negative", errOnly(decodeRenameRequest), `{"retention_seconds":-1}`, 400},
		{"retention too long", errOnly(decodeRenameRequest), `{"retention_seconds":9223372037}`, 400},
		{"retention not a number", errOnly(decodeRenameRequest), `{"retention_seconds":"1h"}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.decode([]byte(tt.in)), tt.code)
		})
	}
}

// idList returns n distinct quoted user_ids, comma-separated.
func idList(prefix string, n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprintf("%s%d", prefix, i))
	}
	return strings.Join(ids, ",")
}

// TestDecodeSendMentions checks the mentions of a send: a set in first-mention order, and
// the errors' words, over HTTP and in a frame alike.
func TestDecodeSendMentions(t *testing.T) {
	const head = `{"conv_id":"c","client_msg_id":"m","content_type":1,"content":1,"mentions":`
	req, err := decodeSendRequest([]byte(head + `["bob","carol","bob","alice"]}`))
	if err != nil || !slices.Equal(req.Mentions, []string{"bob", "carol", "alice"}) {
		t.Fatalf("got %+v, %v", req, err)
	}
	cf, err := decodeClientFrame([]byte(`{"id":"1","op":"send",` + head[1:] + `["bob","bob"]}`))
	if p, ok := cf.params.(protocol.SendRequest); err != nil || cf.paramsErr != nil || !ok || !slices.Equal(p.Mentions, []string{"bob"}) {
		t.Fatalf("frame: got %+v, %v", cf, err)
	}
	for in, want := range map[string]string{
		head + `[` + idList("u", protocol.MaxMentions+1) + `]}`: "invalid request: mentions has more than 50 entries",
		head + `["bob","no/pe"]}`:                               "invalid request: mentions[1] is not a valid user_id",
	} {
		if _, err := decodeSendRequest([]byte(in)); errString(err) != want {
			t.Errorf("%.80s: error %v, want %q", in, err, want)
		}
		cf, err := decodeClientFrame([]byte(`{"id":"1","op":"send",` + in[1:]))
		if err != nil || errString(cf.paramsErr) != want {
			t.Errorf("frame %.80s: error %v, %v, want %q", in, err, cf.paramsErr, want)
		}
	}
}

// TestDecodeMemberListsDeduplicated checks that lists come out as sets in first-mention order.
func TestDecodeMemberListsDeduplicated(t *testing.T) {
	req, err := decodeMembersRequest([]byte(`{"add":["b","a","b","a","c"],"remove":["d","d"]}`))
	if err != nil || !slices.Equal(req.Add, []string{"b", "a", "c"}) || !slices.Equal(req.Remove, []string{"d"}) {
		t.Fatalf("got %+v, %v", req, err)
	}
	g, err := decodeCreateConversationRequest([]byte(`{"type":"group","members":["x","x","y"]}`))
	if err != nil || !slices.Equal(g.Members, []string{"x", "y"}) {
		t.Fatalf("got %+v, %v", g, err)
	}
}

func errOnly[T any](f func([]byte) (T, error)) func([]byte) error {
	return func(b []byte) error {
		_, err := f(b)
		return err
	}
}

func TestQueryInt(t *testing.T) {
	tests := []struct {
		name, query string
		def, min    int64
		want        int64
		code        int
	}{
		{"absent", "", 7, 0, 7, 0},
		{"empty", "n=", 7, 0, 7, 0},
		{"value", "n=42", 0, 0, 42, 0},
		{"negative allowed", "n=-3", 0, -10, -3, 0},
		{"below min", "n=-1", 0, 0, 0, 400},
		{"float", "n=1.5", 0, 0, 0, 400},
		{"word", "n=abc", 0, 0, 0, 400},
		{"overflow", "n=99999999999999999999", 0, 0, 0, 400},
		{"space", "n=%201", 0, 0, 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := queryInt(q, "n", tt.def, tt.min)
			wantCode(t, err, tt.code)
			if err == nil && got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
	if _, err := requiredQueryInt(url.Values{}, "cursor", 0); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("missing required parameter: %v", err)
	}
}

// ---- fuzz targets: every decoder of client input. Their seeds run under plain go test. ----

// fuzzSeeds are shared seed inputs: valid frames of every op, and broken ones.
func fuzzSeeds() []string {
	return []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"id":1}`, `{"id":"1","op":"ping"}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":1,"content":{"text":"hi"},"extra":{"a":"b"}}`,
		`{"id":"2","op":"read","conv_id":"c1","seq":3}`,
		`{"id":"3","op":"delivered","conv_id":"c1","seq":0}`,
		`{"id":"4","op":"recall","conv_id":"c1","seq":1}`,
		`{"id":"5","op":"sync","cursor":10,"limit":1000}`,
		`{"user_id":"alice","device_id":"phone","ttl_seconds":3600,"name":"A"}`,
		`{"type":"group","name":"g","members":["a","b"],"read_detail":true}`,
		`{"type":"direct","peer_id":"bob"}`,
		`{"add":["a"],"remove":["b"]}`, `{"name":"new"}`,
		`{"seq":1e3}`, `{"seq":-1}`, `{"seq":1.5}`, `{"content":null}`,
		"{\"id\":\"\xff\",\"op\":\"ping\"}", `{"id":"1","op":"ping"} trailing`, `{"a":`,
		// what checkStrict refuses: invalid UTF-8 in content, extra and a key, a lone
		// surrogate, duplicate and case-variant keys, deep nesting, integers past 2^53-1
		"{\"id\":\"1\",\"op\":\"send\",\"conv_id\":\"c1\",\"client_msg_id\":\"m1\",\"content_type\":1,\"content\":{\"text\":\"\xc3\x28\"}}",
		"{\"conv_id\":\"c1\",\"client_msg_id\":\"m1\",\"content_type\":1,\"content\":1,\"extra\":{\"k\":\"\xed\xa0\x80\"}}",
		"{\"conv_id\":\"c1\",\"\xff\":1,\"seq\":2}",
		`{"conv_id":"c1","client_msg_id":"m1","content_type":1,"content":"\ud800"}`,
		`{"id":"1","op":"send","conv_id":"c1","conv_id":"c2","client_msg_id":"m1","content_type":1,"content":{"a":1,"a":2}}`,
		`{"ID":"1","Op":"ping","Conv_ID":"c1","SEQ":1,"Cursor":1,"USER_ID":"a","Members":["a"]}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":1,"content":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":9007199254740992,"content":1}`,
		`{"id":"1","op":"read","conv_id":"c1","seq":-9007199254740992}`,
		`{"type":"group","members":["a","a","b","a"],"add":["a","a"],"remove":["b","b"]}`,
	}
}

// fuzzDecoder checks that decode never panics and fails only with 400 or 413.
func fuzzDecoder(f *testing.F, decode func([]byte) error) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := decode(data); err != nil {
			if c := statusOf(err); c != http.StatusBadRequest && c != http.StatusRequestEntityTooLarge {
				t.Fatalf("decode error %q maps to %d", err, c)
			}
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		fr, err := decodeFrame(b)
		if err == nil && fr.Op == "" {
			return errorf("accepted a frame without op")
		}
		return err
	})
}

func FuzzDecodeSendRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeSendRequest(b)
		if err == nil && (!protocol.ValidConvID(req.ConvID) || !protocol.ValidClientMsgID(req.ClientMsgID) ||
			req.ContentType < 1 || req.ContentType > protocol.MaxSafeInteger || len(req.Content) == 0 ||
			!jsontext.Value(req.Content).IsValid() || !utf8.Valid(b)) {
			return errorf("accepted an invalid send: %+v", req)
		}
		return err
	})
}

func FuzzDecodePositionRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodePositionRequest(b, bytes.Contains(b, []byte(`"op"`)))
		if err == nil && (req.Seq == nil || *req.Seq < 0) {
			return errorf("accepted an invalid position: %+v", req)
		}
		return err
	})
}

func FuzzDecodeRecallRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeRecallRequest(b)
		if err == nil && (req.Seq == nil || !protocol.ValidConvID(req.ConvID)) {
			return errorf("accepted an invalid recall: %+v", req)
		}
		return err
	})
}

func FuzzDecodeSyncParams(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		p, err := decodeSyncParams(b)
		if err == nil && (p.Cursor == nil || *p.Cursor < 0 || p.Limit < 0) {
			return errorf("accepted invalid sync params: %+v", p)
		}
		return err
	})
}

func FuzzDecodeCreateUserRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeCreateUserRequest(b)
		if err == nil && !protocol.ValidUserID(req.UserID) {
			return errorf("accepted an invalid user: %+v", req)
		}
		return err
	})
}

func FuzzDecodeTokenRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeTokenRequest(b)
		if err == nil && (!protocol.ValidUserID(req.UserID) || !protocol.ValidDeviceID(req.DeviceID) ||
			req.TTLSeconds < 0 || req.TTLSeconds > maxTTLSeconds) {
			return errorf("accepted an invalid token request: %+v", req)
		}
		return err
	})
}

func FuzzDecodeCreateConversationRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeCreateConversationRequest(b)
		if err == nil && req.Type != protocol.TypeDirect && req.Type != protocol.TypeGroup {
			return errorf("accepted type %q", req.Type)
		}
		if err == nil && req.Type == protocol.TypeGroup && !isUserIDSet(req.Members) {
			return errorf("accepted members that are not a set of at most %d: %v", protocol.MaxRequestListLen, req.Members)
		}
		return err
	})
}

func FuzzDecodeMembersRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeMembersRequest(b)
		if err == nil && (!isUserIDSet(req.Add) || !isUserIDSet(req.Remove)) {
			return errorf("accepted lists that are not sets of at most %d: %+v", protocol.MaxRequestListLen, req)
		}
		return err
	})
}

// isUserIDSet reports whether ids is what userIDSet returns: valid, without repeats, short.
func isUserIDSet(ids []string) bool {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] || !protocol.ValidUserID(id) {
			return false
		}
		seen[id] = true
	}
	return len(ids) <= protocol.MaxRequestListLen
}

func FuzzDecodeRenameRequest(f *testing.F) {
	fuzzDecoder(f, func(b []byte) error {
		req, err := decodeRenameRequest(b)
		if err == nil && req.Name == nil {
			return errorf("accepted a rename without name")
		}
		return err
	})
}

func FuzzQueryInt(f *testing.F) {
	for _, s := range []string{"cursor=1", "cursor=", "cursor=-1", "cursor=1.0", "cursor=abc", "cursor=9223372036854775808", "cursor=%zz", "cursor=1&cursor=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		n, err := queryInt(q, "cursor", 0, 0)
		if err != nil {
			if statusOf(err) != http.StatusBadRequest {
				t.Fatalf("error %q maps to %d", err, statusOf(err))
			}
			return
		}
		if n < 0 {
			t.Fatalf("accepted %d below the minimum", n)
		}
	})
}

// errorf makes a property violation fail the fuzz target (it maps to 500).
func errorf(format string, args ...any) error {
	return &statusError{code: http.StatusInternalServerError, msg: "property violated: " + fmt.Sprintf(format, args...)}
}

// BenchmarkDecodeLongMemberList measures the refusal of a member list of 1 MiB: it reads the
// list only up to its entry past protocol.MaxRequestListLen, so it costs the same for any
// length.
func BenchmarkDecodeLongMemberList(b *testing.B) {
	body := []byte(`{"add":[` + strings.Repeat(`"victim",`, 1<<20/9) + `"victim"]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodeMembersRequest(body); statusOf(err) != http.StatusBadRequest {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeClientFrame holds decodeClientFrame (one strict walk, one decode) to
// decodeFrameInTwo (envelope, then params, each checked and decoded whole): the same id, op,
// params and errors, word for word, for any input.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range append(fuzzSeeds(), frameSeeds()...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeClientFrame(data)
		want, wantErr := decodeFrameInTwo(data)
		if got.Frame != want.Frame || !reflect.DeepEqual(got.params, want.params) ||
			errString(err) != errString(wantErr) || errString(got.paramsErr) != errString(want.paramsErr) {
			t.Fatalf("%q:\none walk: %+v, %v\nin two:   %+v, %v", data, got, err, want, wantErr)
		}
		if c := statusOf(cmp.Or(err, got.paramsErr)); err != nil && c != http.StatusBadRequest && c != http.StatusRequestEntityTooLarge {
			t.Fatalf("decode error %q maps to %d", err, c)
		}
	})
}

// frameSeeds are frames with faults in the envelope and the params both, in either order,
// and frames whose envelope the walk must not vouch for.
func frameSeeds() []string {
	return []string{
		// The fast path of a send (sendFromMembers) and its edges.
		`{"id":"a1","op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{"text":"hi"}}`,
		`{ "op" : "send" , "conv_id" : "c_abc" , "client_msg_id" : "m1" , "content_type" : 1 , "content" : { "text" : "hi" } , "id" : "a1" }`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":"plain"}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1e0,"content":[1]}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":-0,"content":true}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":9007199254740992,"content":1}`,
		`{"op":"send","conv_id":"c_\u0061bc","client_msg_id":"m1","content_type":1,"content":null}`,
		`{"op":"send","conv_id":null,"client_msg_id":"m1","content_type":null,"content":{}}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":2147483648,"content":1}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{"text":"a\u0000"}}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":"a\\u0000"}`,
		`{"id":"\u0000","op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":"\u0000"}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":1,"extra":{"\u0000":"v"}}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{},"extra":{"k":"v"}}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{},"other":1}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{},"mentions":["b","a","b"]}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{},"mentions":["b",1]}`,
		`{"op":"send","conv_id":"c_abc","client_msg_id":"m1","content_type":1,"content":{},"Mentions":["b"]}`,
		`{"id":1,"op":"send","Conv_ID":"x"}`, `{"Conv_ID":"x","id":1,"op":"send"}`,
		`{"conv_id":5,"id":1,"op":"send"}`, `{"id":"1","op":"read","conv_id":5,"seq":"x"}`,
		`{"id":"1","op":"sync","Cursor":1,"cursor":1e300}`, `{"cursor":1e300,"id":"1","op":"sync","Limit":1}`,
		`{"id":"1","op":"ping","Seq":1,"cursor":"x"}`, `{"id":"1","op":"ping"}  ` + "\n", `{"id":"1","op":"ping"}{}`,
		`{"id":null,"op":"ping"}`, `{"id":"1","op":null}`, `{"i\u0064":"\u0031\n","\u006fp":"p\u0069ng"}`,
		`{"id":"1","op":"typing","seq":1}`, `{"id":"1","op":"` + strings.Repeat("x", 40) + `"}`,
		`{"ID":"1","op":"ping"}`, `{"id":1e300,"op":"ping"}`, `{"id":"1","op":"recall","conv_id":"c1","seq":1,"seq":2}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":1,"content":"x","extra":{"a":"b"}}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":1,"content":"` + strings.Repeat("x", protocol.MaxContentBytes-20) + `","extra":{"k":"` + strings.Repeat("y", 40) + `"}}`,
		`{"id":"1","op":"send","conv_id":"c1","client_msg_id":"m1","content_type":1,"content":"x","extra":{"a":` + strings.Repeat("[", 40),
		` {"id":"1", "op" : "read" , "conv_id":"c1","seq":  3 } `,
		// keys that Unicode case folding may or may not match to a field
		`{"ıd":"x","op":"ping"}`, `{"İd":"x","op":"ping"}`, `{"id":"1","op":"read","conv_id":"c1","ſeq":1}`,
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
