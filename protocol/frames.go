package protocol

import (
	"encoding/json"
	"strconv"
)

// The encoders of this file write the client frames that are sent most often without
// reflection: a load generator sends thousands of them a second from the machine it
// measures. They write the bytes json.Marshal writes for the same values.

// AppendFrame appends the client frame {"id":id,"op":op, ...} to dst, with the members of
// params, a JSON object as json.Marshal writes it, flat beside id and op (section 9). params
// may be nil or {} for an op without any.
func AppendFrame(dst []byte, id, op string, params []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, id)
	dst = append(dst, `,"op":`...)
	dst = AppendString(dst, op)
	if len(params) <= 2 { // nil or {}
		return append(dst, '}')
	}
	dst = append(dst, ',')
	return append(dst, params[1:]...)
}

// AppendSendRequest appends req as JSON to dst: the bytes json.Marshal(req) gives when
// req.Content is json.Marshal's own output (compact, valid JSON), which is copied as it is.
// Content must be valid JSON; nil is written as null.
func AppendSendRequest(dst []byte, req *SendRequest) []byte {
	dst = append(dst, `{"conv_id":`...)
	dst = AppendString(dst, req.ConvID)
	dst = append(dst, `,"client_msg_id":`...)
	dst = AppendString(dst, req.ClientMsgID)
	dst = append(dst, `,"content_type":`...)
	dst = strconv.AppendInt(dst, int64(req.ContentType), 10)
	dst = append(dst, `,"content":`...)
	if req.Content == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, req.Content...)
	}
	if len(req.Extra) > 0 {
		extra, _ := json.Marshal(req.Extra) // a map of strings always marshals
		dst = append(dst, `,"extra":`...)
		dst = append(dst, extra...)
	}
	return append(dst, '}')
}

// AppendString appends s as json.Marshal encodes it. Identifiers and event types need no
// escaping and are copied as they are; anything else goes through json.Marshal (which
// escapes <, > and &, and replaces invalid UTF-8). The SDK's frames, the server's pushes and
// its message payloads all quote their strings with it.
func AppendString(dst []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
