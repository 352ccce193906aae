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
//
// checkStrict runs first, so that a list too long is refused before encoding/json builds it;
// when the body is merely malformed, encoding/json's own message (which names the byte) is
// the one given, unless encoding/json accepts what jsontext does not (a "\ud800" escape).
func decodeObject(data []byte, v any) error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return invalidf("body is empty: want a JSON object")
	}
	if trimmed[0] != '{' {
		return invalidf("body must be a JSON object")
	}
	malformed := checkStrict(data, reflect.TypeOf(v).Elem())
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

// decodeSendRequest decodes POST /v1/messages and the "send" op (whose other frame fields
// are ignored).
func decodeSendRequest(data []byte) (protocol.SendRequest, error) {
	var req protocol.SendRequest
	if err := decodeObject(data, &req); err != nil {
		return req, err
	}
	switch {
	case !protocol.ValidConvID(req.ConvID):
		return req, invalidf("conv_id is missing or malformed")
	case !protocol.ValidClientMsgID(req.ClientMsgID):
		return req, invalidf("client_msg_id must be 1-64 characters of [A-Za-z0-9_-]")
	case req.ContentType < 1:
		return req, invalidf("content_type must be an integer of 1 or more")
	case len(req.Content) == 0 || string(req.Content) == "null":
		return req, invalidf("content is required")
	}
	// content plus extra, measured in the request's own bytes, may not exceed the limit. They
	// are parts of data, so only a larger body needs measuring.
	if len(data) > protocol.MaxContentBytes {
		var raw struct {
			Extra json.RawMessage `json:"extra"`
		}
		_ = json.Unmarshal(data, &raw) // data decoded above, so this cannot fail
		if n := len(req.Content) + len(raw.Extra); n > protocol.MaxContentBytes {
			return req, fmt.Errorf("%w: content plus extra is %d bytes, more than %d", chat.ErrTooLarge, n, protocol.MaxContentBytes)
		}
	}
	return req, nil
}

// decodePositionRequest decodes a read or delivered update. wantConv says whether conv_id
// must be in the body (the WebSocket ops); over HTTP it is in the path.
func decodePositionRequest(data []byte, wantConv bool) (protocol.PositionRequest, error) {
	var req protocol.PositionRequest
	if err := decodeObject(data, &req); err != nil {
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

// decodeRecallRequest decodes POST /v1/messages/recall and the "recall" op.
func decodeRecallRequest(data []byte) (protocol.RecallRequest, error) {
	var req protocol.RecallRequest
	if err := decodeObject(data, &req); err != nil {
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

// decodeSyncParams decodes the params of the "sync" op.
func decodeSyncParams(data []byte) (protocol.SyncParams, error) {
	var p protocol.SyncParams
	if err := decodeObject(data, &p); err != nil {
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
	if req.Name == nil {
		return req, invalidf("name is required")
	}
	return req, nil
}

// userIDSet checks the list of user_ids named field and returns it without repeats, in the
// order of first mention (checkStrict has refused lists of more than protocol.MaxRequestListLen).
func userIDSet(field string, ids []string) ([]string, error) {
	seen := make(map[string]bool, len(ids))
	set := ids[:0]
	for i, id := range ids {
		if !protocol.ValidUserID(id) {
			return nil, invalidf("%s[%d] is not a valid user_id", field, i)
		}
		if !seen[id] {
			seen[id] = true
			set = append(set, id)
		}
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
