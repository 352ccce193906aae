package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/parleychat/parley/protocol"
)

// pong is the result of the "ping" op.
type pong struct {
	Op string `json:"op"`
}

// ackPrefix is how a marshalled protocol.MessageAck starts: its own "code":0, which the
// reply already carries.
var ackPrefix = []byte(`{"code":0,`)

// encodeReply returns the success reply to frame id: {"id":id,"code":0, ...result's fields}.
// result must marshal to a JSON object (a struct); nil adds no fields. A leading "code":0 of
// result (protocol.MessageAck has one) is dropped, so no key appears twice.
func encodeReply(id string, result any) ([]byte, error) {
	idJSON, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	var inner []byte
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			return nil, err
		}
		switch {
		case bytes.HasPrefix(b, ackPrefix):
			inner = b[len(ackPrefix) : len(b)-1]
		case len(b) >= 2 && b[0] == '{':
			inner = b[1 : len(b)-1]
		default:
			return nil, fmt.Errorf("gateway: reply result %T is not a JSON object", result)
		}
	}
	out := make([]byte, 0, len(idJSON)+len(inner)+20)
	out = append(out, `{"id":`...)
	out = append(out, idJSON...)
	out = append(out, `,"code":0`...)
	if len(inner) > 0 {
		out = append(out, ',')
		out = append(out, inner...)
	}
	return append(out, '}'), nil
}

// encodeErrorReply returns {"id","code","error"} (plus "retry_after" for 429).
func encodeErrorReply(id string, code int, msg string, retryAfter int) []byte {
	b, _ := json.Marshal(protocol.ReplyFrame{ID: id, Code: code, Error: msg, RetryAfter: retryAfter}) // strings and ints always marshal
	return b
}

// encodeEventPush returns {"op":"event","event":ev}, the same bytes json.Marshal of a
// protocol.PushFrame gives. It is written by hand because it runs once per recipient of
// every message: json.Marshal would re-validate and compact the payload, which the server
// encoded itself, each time.
func encodeEventPush(ev *protocol.SyncEvent) ([]byte, error) {
	data := ev.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	typ, err := json.Marshal(ev.Type)
	if err != nil {
		return nil, err
	}
	conv, err := json.Marshal(ev.ConvID)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 80+len(typ)+len(conv)+len(data))
	b = append(b, `{"op":"event","event":{"cursor":`...)
	b = strconv.AppendInt(b, ev.Cursor, 10)
	b = append(b, `,"type":`...)
	b = append(b, typ...)
	b = append(b, `,"conv_id":`...)
	b = append(b, conv...)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, ev.TS, 10)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, "}}"...), nil
}

// encodeErrorPush returns {"op":"error","code":code,"error":msg}, sent before a close.
func encodeErrorPush(code int, msg string) []byte {
	b, _ := json.Marshal(protocol.PushFrame{Op: protocol.OpError, Code: code, Error: msg}) // always marshals
	return b
}
