package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// The decoders of this file turn client bytes into protocol requests. They are pure (no
// service, no I/O) so that they can be fuzzed alone. Each returns an error wrapping
// chat.ErrInvalid (400) or chat.ErrTooLarge (413). They check what the wire contract says
// about form: JSON shape, required fields, identifier syntax. Rules that need state (peer =
// self, membership, limits of the conversation) stay in chat.

// maxTTLSeconds bounds ttl_seconds so that the expiry stays a sane time (100 years).
const maxTTLSeconds = 100 * 365 * 24 * 3600

// decodeObject decodes data, which must be exactly one JSON object, into v, a pointer to a
// request struct. Unknown fields are ignored; wrong types, malformed JSON and trailing data
// are errors, and so is everything checkStrict refuses.
func decodeObject(data []byte, v any) error {
	if err := objectStart(data); err != nil {
		return err
	}
	return unmarshalChecked(data, v, checkStrict(data, reflect.TypeOf(v).Elem()))
}

// objectStart refuses data that is empty or does not start as a JSON object.
func objectStart(data []byte) error {
	trimmed := bytes.TrimLeft(data, jsonSpace)
	if len(trimmed) == 0 {
		return invalidf("body is empty: want a JSON object")
	}
	if trimmed[0] != '{' {
		return invalidf("body must be a JSON object")
	}
	return nil
}

// jsonSpace is the white space JSON allows between tokens.
const jsonSpace = " \t\r\n"

// unmarshalChecked decodes data into v once the strict check has said malformed about it.
//
// The check runs first, so that a list too long is refused before encoding/json builds it;
// when the body is merely malformed, encoding/json's own message (which names the byte) is
// the one given, unless encoding/json accepts what jsontext does not (a "\ud800" escape).
func unmarshalChecked(data []byte, v any, malformed error) error {
	if errors.Is(malformed, chat.ErrInvalid) {
		return malformed // a rule of checkStrict, not a syntax error
	}
	if err := json.Unmarshal(data, v); err != nil {
		return invalidf("%s", describeJSONError(err))
	}
	if malformed != nil {
		return invalidf("malformed JSON: %s", strings.TrimPrefix(malformed.Error(), "jsontext: "))
	}
	return nil
}

// body is a client JSON object to decode into a request: an HTTP body, or a WebSocket frame
// that decodeClientFrame has walked already, whose strict check is then finished from the
// members of that one walk instead of walking it again.
type body struct {
	data    []byte
	walked  bool     // data had one strict walk, which found no fault: members are its members
	members []member // valid only while decodeClientFrame runs
}

// bodyOf returns data as a body that gets the whole strict check when decoded.
func bodyOf(data []byte) body { return body{data: data} }

// decode decodes b into v (a pointer to a request struct) as decodeObject does.
func (b body) decode(v any) error {
	t := reflect.TypeOf(v).Elem()
	if !b.walked || hasListMember(b.members, t) { // the walk of a frame did not apply the list rule
		return decodeObject(b.data, v)
	}
	return unmarshalChecked(b.data, v, checkMembers(b.members, t))
}

// extra returns the bytes of b's "extra" member, or nil if there is none. b must have
// decoded without error.
func (b body) extra() json.RawMessage {
	if b.walked {
		for _, m := range b.members {
			if string(m.name) == "extra" {
				return m.value
			}
		}
		return nil
	}
	var raw struct {
		Extra json.RawMessage `json:"extra"`
	}
	_ = json.Unmarshal(b.data, &raw) // decoded before, so this cannot fail
	return raw.Extra
}

// describeJSONError turns an encoding/json error into a message for the client.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "body must be a JSON object"
		}
		return fmt.Sprintf("field %q must be %s", typ.Field, jsonKind(typ.Type))
	}
	return "malformed JSON: " + err.Error()
}

// jsonKind names the JSON form that decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a different type"
}

// decodeFrame decodes the envelope of a WebSocket client frame. When the frame is broken,
// the returned Frame still carries the id if one could be read, so that the error reply can
// name it.
func decodeFrame(data []byte) (protocol.Frame, error) {
	var f protocol.Frame
	if err := decodeObject(data, &f); err != nil {
		var idOnly struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(data, &idOnly) == nil {
			f = protocol.Frame{ID: idOnly.ID}
		} else {
			f = protocol.Frame{}
		}
		return f, err
	}
	if f.Op == "" {
		return f, invalidf("op is required")
	}
	return f, nil
}

// clientFrame is a WebSocket client frame decoded: its envelope, and its op's params (a
// protocol.SendRequest, PositionRequest, RecallRequest or SyncParams; nil for "ping"), or
// why they are refused. The params' error is kept apart from the envelope's because the two
// are answered at different steps: a frame whose envelope is broken counts as no op against
// the rate limits, one with broken params as its op.
type clientFrame struct {
	protocol.Frame
	params    any
	paramsErr error
}

// decodeClientFrame decodes a frame with one strict walk and one decode by encoding/json (of
// the op's params; the envelope is read from the walk), where decodeFrameInTwo walks and
// decodes the frame twice, as the envelope and then as the params: the strict check was half
// of the cost of a small frame. The answers, errors included, are decodeFrameInTwo's word
// for word (FuzzDecodeClientFrame holds the two to it): a frame whose envelope is refused, or
// that the walk cannot vouch for, is left to decodeFrameInTwo, so that the rare frame with a
// broken envelope is walked twice but every error keeps its wording.
func decodeClientFrame(data []byte) (clientFrame, error) {
	w := strictWalks.Get().(*strictWalk)
	defer w.release()
	if f, ok := w.envelope(data); ok {
		return withParams(f, body{data: data, walked: true, members: w.members}), nil
	}
	return decodeFrameInTwo(data)
}

// decodeFrameInTwo decodes a frame as two objects, each with its whole strict check: the
// envelope (decodeFrame), then the params of its op.
func decodeFrameInTwo(data []byte) (clientFrame, error) {
	f, err := decodeFrame(data)
	if err != nil {
		return clientFrame{Frame: f}, err
	}
	return withParams(f, bodyOf(data)), nil
}

// envelope walks data and returns its id and op, if the walk vouches for what decodeFrame
// would answer: no fault anywhere (syntax, strict rules of the envelope), nothing after the
// object, id and op strings (or null), and an op.
func (w *strictWalk) envelope(data []byte) (protocol.Frame, bool) {
	var f protocol.Frame
	if objectStart(data) != nil || w.walk(data, nil) != nil ||
		len(bytes.TrimLeft(data[w.dec.InputOffset():], jsonSpace)) > 0 ||
		checkMembers(w.members, reflect.TypeFor[protocol.Frame]()) != nil {
		return f, false
	}
	ok := true
	for _, m := range w.members {
		switch string(m.name) {
		case "id":
			f.ID, ok = stringMember(m)
		case "op":
			f.Op, ok = stringMember(m)
		}
		if !ok {
			return f, false
		}
	}
	return f, f.Op != ""
}

// stringMember returns the string value of m as encoding/json decodes it into a string
// field ("" for null); ok is false for any other kind of value.
func stringMember(m member) (s string, ok bool) {
	switch m.kind {
	case 'n':
		return "", true
	case '"':
		if v := m.value[1 : len(m.value)-1]; bytes.IndexByte(v, '\\') < 0 {
			return string(v), true
		}
		v, err := jsontext.AppendUnquote(nil, m.value)
		return string(v), err == nil
	}
	return "", false
}

// withParams returns f with the params of its op decoded from b.
func withParams(f protocol.Frame, b body) clientFrame {
	cf := clientFrame{Frame: f}
	switch f.Op {
	case protocol.OpSend:
		cf.params, cf.paramsErr = decodeSend(b)
	case protocol.OpRead, protocol.OpDelivered:
		cf.params, cf.paramsErr = decodePosition(b, true)
	case protocol.OpRecall:
		cf.params, cf.paramsErr = decodeRecall(b)
	case protocol.OpSync:
		cf.params, cf.paramsErr = decodeSync(b)
	case protocol.OpOpen, protocol.OpClose:
		cf.params, cf.paramsErr = decodeConv(b)
	case protocol.OpPresenceSubscribe, protocol.OpPresenceUnsubscribe:
		cf.params, cf.paramsErr = decodePresenceSubscribe(b)
	case protocol.OpPresenceSet:
		cf.params, cf.paramsErr = decodePresenceSet(b)
	case protocol.OpTyping:
		cf.params, cf.paramsErr = decodeTyping(b)
	case protocol.OpPing: // no params
	default:
		op := f.Op
		if len(op) > 32 {
			op = op[:32] + "..."
		}
		cf.paramsErr = invalidf("unknown op %q", op)
	}
	return cf
}

// decodeSendRequest decodes POST /v1/messages.
func decodeSendRequest(data []byte) (protocol.SendRequest, error) { return decodeSend(bodyOf(data)) }

// decodeSend decodes a send request: the body of POST /v1/messages, or a "send" frame (whose
// other frame fields are ignored).
func decodeSend(b body) (protocol.SendRequest, error) {
	req, ok := sendFromMembers(b)
	if !ok {
		if err := b.decode(&req); err != nil {
			return req, err
		}
	}
	switch {
	case !protocol.ValidConvID(req.ConvID):
		return req, invalidf("conv_id is missing or malformed")
	case !protocol.ValidClientMsgID(req.ClientMsgID):
		return req, invalidf("client_msg_id must be 1-64 characters of [A-Za-z0-9_-]")
	case req.ContentType < 1:
		return req, invalidf("content_type must be an integer of 1 or more")
	case req.ContentType > protocol.MaxContentType:
		return req, invalidf("content_type must be at most %d (2^31-1)", protocol.MaxContentType)
	case len(req.Content) == 0 || string(req.Content) == "null":
		return req, invalidf("content is required")
	}
	var err error
	if req.Mentions, err = userIDSet("mentions", req.Mentions); err != nil {
		return req, err
	}
	// content plus extra, measured in the request's own bytes, may not exceed the limit. They
	// are parts of the data, so only a larger body needs measuring.
	if len(b.data) > protocol.MaxContentBytes {
		if n := len(req.Content) + len(b.extra()); n > protocol.MaxContentBytes {
			return req, fmt.Errorf("%w: content plus extra is %d bytes, more than %d", chat.ErrTooLarge, n, protocol.MaxContentBytes)
		}
	}
	return req, nil
}

// sendFromMembers reads a send request straight from the members of a frame's strict walk,
// for the common frame whose every member is spelled exactly, whose strings have no escapes
// and whose content_type is a plain integer: then it is what encoding/json would decode, and
// decoding it again by reflection cost a fifth of serving a send's frame. Anything else
// (extra, unknown or duplicate names, escapes, null) answers ok false, and the frame is
// decoded in full, errors and all (FuzzDecodeClientFrame holds the two to the same answers).
func sendFromMembers(b body) (req protocol.SendRequest, ok bool) {
	if !b.walked {
		return req, false
	}
	var seen uint8
	for _, m := range b.members {
		var bit uint8
		switch string(m.name) {
		case "id", "op":
			continue // the envelope's, read by envelope
		case "conv_id":
			bit = 1
			req.ConvID, ok = plainString(m)
		case "client_msg_id":
			bit = 2
			req.ClientMsgID, ok = plainString(m)
		case "content_type":
			bit, req.ContentType, ok = 4, 0, false
			if m.kind == '0' {
				n, err := strconv.ParseInt(string(m.value), 10, 64)
				req.ContentType, ok = int(n), err == nil && n >= -protocol.MaxSafeInteger && n <= protocol.MaxSafeInteger
			}
		case "content":
			bit = 8
			switch m.kind {
			case '{', '[', '"', '0', 't', 'f':
				// A NUL is refused by checkMembers, which the full decode applies.
				req.Content, ok = bytes.Clone(m.value), m.value != nil && !holdsNUL(m.value)
			default:
				ok = false
			}
		default:
			return protocol.SendRequest{}, false // extra, or a name encoding/json may match
		}
		if !ok || seen&bit != 0 {
			return protocol.SendRequest{}, false
		}
		seen |= bit
	}
	return req, true
}

// plainString returns m's string value if it is a string without escapes.
func plainString(m member) (string, bool) {
	if m.kind != '"' || len(m.value) < 2 || bytes.IndexByte(m.value, '\\') >= 0 {
		return "", false
	}
	return string(m.value[1 : len(m.value)-1]), true
}

// decodePositionRequest decodes the body of a read or delivered update (see decodePosition).
func decodePositionRequest(data []byte, wantConv bool) (protocol.PositionRequest, error) {
	return decodePosition(bodyOf(data), wantConv)
}

// decodePosition decodes a read or delivered update. wantConv says whether conv_id must be
// in the body (the WebSocket ops); over HTTP it is in the path.
func decodePosition(b body, wantConv bool) (protocol.PositionRequest, error) {
	var req protocol.PositionRequest
	if err := b.decode(&req); err != nil {
		return req, err
	}
	switch {
	case wantConv && !protocol.ValidConvID(req.ConvID):
		return req, invalidf("conv_id is missing or malformed")
	case !wantConv && req.ConvID != "" && !protocol.ValidConvID(req.ConvID):
		return req, invalidf("conv_id is malformed")
	case req.Seq == nil:
		return req, invalidf("seq is required")
	case *req.Seq < 0:
		return req, invalidf("seq must not be negative")
	}
	return req, nil
}

// decodeRecallRequest decodes POST /v1/messages/recall.
func decodeRecallRequest(data []byte) (protocol.RecallRequest, error) {
	return decodeRecall(bodyOf(data))
}

// decodeRecall decodes a recall: POST /v1/messages/recall or the "recall" op.
func decodeRecall(b body) (protocol.RecallRequest, error) {
	var req protocol.RecallRequest
	if err := b.decode(&req); err != nil {
		return req, err
	}
	switch {
	case !protocol.ValidConvID(req.ConvID):
		return req, invalidf("conv_id is missing or malformed")
	case req.Seq == nil:
		return req, invalidf("seq is required")
	}
	return req, nil
}

// decodeConv decodes the params of the "open" and "close" ops.
func decodeConv(b body) (protocol.ConvRequest, error) {
	var p protocol.ConvRequest
	if err := b.decode(&p); err != nil {
		return p, err
	}
	if !protocol.ValidConvID(p.ConvID) {
		return p, invalidf("conv_id is missing or malformed")
	}
	return p, nil
}

// decodePresenceSubscribe decodes the params of "presence_subscribe" and
// "presence_unsubscribe".
func decodePresenceSubscribe(b body) (protocol.PresenceSubscribeRequest, error) {
	var p protocol.PresenceSubscribeRequest
	if err := b.decode(&p); err != nil {
		return p, err
	}
	if len(p.Users) > protocol.MaxPresenceSubscriptions {
		return p, invalidf("users: at most %d", protocol.MaxPresenceSubscriptions)
	}
	for _, u := range p.Users {
		if !protocol.ValidUserID(u) {
			return p, invalidf("users: a user_id is malformed")
		}
	}
	return p, nil
}

// decodePresenceSet decodes the params of "presence_set".
func decodePresenceSet(b body) (protocol.PresenceSetRequest, error) {
	var p protocol.PresenceSetRequest
	if err := b.decode(&p); err != nil {
		return p, err
	}
	if p.State != protocol.PresenceAway && p.State != protocol.PresenceActive {
		return p, invalidf("state must be %q or %q", protocol.PresenceAway, protocol.PresenceActive)
	}
	return p, nil
}

// decodeTyping decodes the params of the "typing" op.
func decodeTyping(b body) (protocol.TypingRequest, error) {
	var p protocol.TypingRequest
	if err := b.decode(&p); err != nil {
		return p, err
	}
	switch {
	case !protocol.ValidConvID(p.ConvID):
		return p, invalidf("conv_id is missing or malformed")
	case p.State != protocol.TypingStarted && p.State != protocol.TypingStopped:
		return p, invalidf("state must be \"started\" or \"stopped\"")
	}
	return p, nil
}

// decodeSyncParams decodes the params of the "sync" op.
func decodeSyncParams(data []byte) (protocol.SyncParams, error) { return decodeSync(bodyOf(data)) }

// decodeSync decodes the params of the "sync" op.
func decodeSync(b body) (protocol.SyncParams, error) {
	var p protocol.SyncParams
	if err := b.decode(&p); err != nil {
		return p, err
	}
	switch {
	case p.Cursor == nil:
		return p, invalidf("cursor is required")
	case *p.Cursor < 0:
		return p, invalidf("cursor must not be negative")
	case p.Limit < 0:
		return p, invalidf("limit must not be negative")
	}
	return p, nil
}

// decodeCreateUserRequest decodes POST /v1/admin/users.
func decodeCreateUserRequest(data []byte) (protocol.CreateUserRequest, error) {
	var req protocol.CreateUserRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	if !protocol.ValidUserID(req.UserID) {
		return req, invalidf("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	}
	return req, nil
}

// decodeTokenRequest decodes POST /v1/admin/tokens.
func decodeTokenRequest(data []byte) (protocol.TokenRequest, error) {
	var req protocol.TokenRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	switch {
	case !protocol.ValidUserID(req.UserID):
		return req, invalidf("user_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	case !protocol.ValidDeviceID(req.DeviceID):
		return req, invalidf("device_id must be 1-64 characters of [A-Za-z0-9_.@-]")
	case req.TTLSeconds < 0:
		return req, invalidf("ttl_seconds must not be negative")
	case req.TTLSeconds > maxTTLSeconds:
		return req, invalidf("ttl_seconds must be at most %d", maxTTLSeconds)
	}
	return req, nil
}

// decodeCreateConversationRequest decodes POST /v1/conversations.
func decodeCreateConversationRequest(data []byte) (protocol.CreateConversationRequest, error) {
	var req protocol.CreateConversationRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	switch req.Type {
	case protocol.TypeDirect:
		if !protocol.ValidUserID(req.PeerID) {
			return req, invalidf("peer_id is missing or malformed")
		}
	case protocol.TypeGroup:
		var err error
		if req.Members, err = userIDSet("members", req.Members); err != nil {
			return req, err
		}
	default:
		return req, invalidf(`type must be "direct" or "group"`)
	}
	return req, nil
}

// decodeMembersRequest decodes POST /v1/conversations/{conv_id}/members.
func decodeMembersRequest(data []byte) (protocol.MembersRequest, error) {
	var req protocol.MembersRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	var err error
	if req.Add, err = userIDSet("add", req.Add); err != nil {
		return req, err
	}
	req.Remove, err = userIDSet("remove", req.Remove)
	return req, err
}

// decodeRenameRequest decodes PATCH /v1/conversations/{conv_id}.
func decodeRenameRequest(data []byte) (protocol.RenameRequest, error) {
	var req protocol.RenameRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	switch r := req.RetentionSeconds; {
	case req.Name == nil && r == nil:
		return req, invalidf("name or retention_seconds is required")
	case r != nil && (*r < 0 || *r > protocol.MaxRetentionSeconds):
		return req, invalidf("retention_seconds must be 0 (the server's retention) or a positive number of seconds up to %d", protocol.MaxRetentionSeconds)
	}
	return req, nil
}

// userIDSet checks the list of user_ids named field and returns it without repeats, in the
// order of first mention (checkStrict has refused lists of more than protocol.MaxRequestListLen).
func userIDSet(field string, ids []string) ([]string, error) {
	set, bad := protocol.UserIDSet(ids)
	if bad >= 0 {
		return nil, invalidf("%s[%d] is not a valid user_id", field, bad)
	}
	return set, nil
}

// queryInt reads the integer query parameter name: def when absent or empty, 400 when it is
// not an integer or is below min.
func queryInt(q url.Values, name string, def, min int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, invalidf("query parameter %s must be an integer", name)
	}
	if n < min {
		return 0, invalidf("query parameter %s must be at least %d", name, min)
	}
	return n, nil
}

// requiredQueryInt is queryInt for a parameter that must be present.
func requiredQueryInt(q url.Values, name string, min int64) (int64, error) {
	if q.Get(name) == "" {
		return 0, invalidf("query parameter %s is required", name)
	}
	return queryInt(q, name, 0, min)
}
