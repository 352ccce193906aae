package protocol

import (
	"bytes"

	"github.com/parleychat/parley/internal/wirejson"
)

// decodeMessage decodes a Message in the layout the server writes (the fields in Message's
// order, no white space, ids without escapes) without reflection: a client catching up
// decodes thousands. ok is false for any other input, which the caller decodes with
// encoding/json; for the input it accepts, the result is encoding/json's.
func decodeMessage(b []byte) (m Message, ok bool) {
	var content []byte
	if b, ok = wirejson.Prefix(b, `{"conv_id":`); ok {
		m.ConvID, b, ok = wirejson.String(b, "")
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"seq":`)
	}
	if ok {
		m.Seq, b, ok = wirejson.Int(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"msg_id":`)
	}
	if ok {
		m.MsgID, b, ok = wirejson.String(b, "")
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"client_msg_id":`)
	}
	if ok {
		m.ClientMsgID, b, ok = wirejson.String(b, "")
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"sender_id":`)
	}
	if ok {
		m.SenderID, b, ok = wirejson.String(b, "")
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"content_type":`)
	}
	var ct int64
	if ok {
		ct, b, ok = wirejson.Int(b)
		m.ContentType = int(ct)
		ok = ok && int64(m.ContentType) == ct
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"content":`)
	}
	if ok {
		content, b, ok = wirejson.Value(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"extra":`)
	}
	if ok {
		m.Extra, b, ok = wirejson.StringMap(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"created_at":`)
	}
	if ok {
		m.CreatedAt, b, ok = wirejson.Int(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"recalled":`)
	}
	if ok {
		m.Recalled, b, ok = wirejson.Bool(b)
	}
	if !ok || string(b) != "}" {
		return Message{}, false
	}
	m.Content = bytes.Clone(content) // encoding/json copies too: the message outlives b's buffer
	return m, true
}
