package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/parleychat/parley/internal/hub"
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
	if ack, ok := result.(protocol.MessageAck); ok { // every send's reply: without reflection
		return appendAckReply(make([]byte, 0, 128+len(id)+len(ack.ConvID)+len(ack.ClientMsgID)), id, &ack), nil
	}
	return encodeReplyReflect(id, result)
}

// appendAckReply appends the reply to a send, byte for byte what encodeReplyReflect
// writes for it (TestAckReplyIsTheReflectiveOne).
func appendAckReply(dst []byte, id string, a *protocol.MessageAck) []byte {
	dst = append(dst, `{"id":`...)
	dst = protocol.AppendString(dst, id)
	dst = append(dst, `,"code":0,"conv_id":`...)
	dst = protocol.AppendString(dst, a.ConvID)
	dst = append(dst, `,"client_msg_id":`...)
	dst = protocol.AppendString(dst, a.ClientMsgID)
	dst = append(dst, `,"msg_id":`...)
	dst = protocol.AppendString(dst, a.MsgID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, a.Seq, 10)
	dst = append(dst, `,"created_at":`...)
	dst = strconv.AppendInt(dst, a.CreatedAt, 10)
	dst = append(dst, `,"duplicate":`...)
	dst = strconv.AppendBool(dst, a.Duplicate)
	return append(dst, '}')
}

// encodeReplyReflect is encodeReply through encoding/json, for every other result.
func encodeReplyReflect(id string, result any) ([]byte, error) {
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

// eventHead is how every event push starts: the cursor, the one part that differs between
// the recipients of an event, comes next.
const eventHead = `{"op":"event","event":{"cursor":`

// appendEventPush appends {"op":"event","event":ev} to dst, the same bytes json.Marshal of a
// protocol.PushFrame gives (but for json.Marshal's HTML escaping inside the payload, which
// the server encoded itself). It runs once per recipient of every event, so it only splices
// ev's cursor between eventHead and the rest of the frame, which is encoded once per event
// and shared by all the recipients of its fanout (hub.Body.Encoded).
func appendEventPush(dst []byte, ev *hub.Event) []byte {
	tail := ev.Encoded(encodeEventTail)
	dst = slices.Grow(dst, len(eventHead)+20+len(tail)) // 20: the longest int64
	dst = append(dst, eventHead...)
	dst = strconv.AppendInt(dst, ev.Cursor, 10)
	return append(dst, tail...)
}

// encodeEventTail returns what follows the cursor in the push frame of an event with body b.
func encodeEventTail(b *hub.Body) []byte {
	// 64: the field names, quotes and braces (59 bytes) and most timestamps' digits, so
	// that appending the tail does not grow the slice a second time.
	out := make([]byte, 0, 64+len(b.Type)+len(b.ConvID)+max(len(b.Data), 4))
	return appendEventTail(out, b.Type, b.ConvID, b.TS, b.Data)
}

// appendEventTail appends what follows the cursor in the push frame of an event.
func appendEventTail(dst []byte, typ, convID string, ts int64, data []byte) []byte {
	dst = append(dst, `,"type":`...)
	dst = protocol.AppendString(dst, typ)
	dst = append(dst, `,"conv_id":`...)
	dst = protocol.AppendString(dst, convID)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, `,"data":`...)
	if len(data) == 0 {
		dst = append(dst, "null"...)
	}
	dst = append(dst, data...)
	return append(dst, "}}"...)
}

// encodedJSON is a response body already encoded, which writeJSON writes as it is.
type encodedJSON []byte

// appendSyncResponse appends resp as json.Marshal encodes it (an empty list for nil events),
// splicing each event's data in as it is, as the pushes do: the server encoded it, with
// json.Marshal or the same bytes (live.AppendMessageJSON), so encoding/json's compaction and
// HTML escaping of it would change nothing, and cost a pass over every byte of a page of
// 1,000 events, besides the reflection.
func appendSyncResponse(dst []byte, resp *protocol.SyncResponse) []byte {
	size := 64
	for i := range resp.Events {
		ev := &resp.Events[i]
		size += 90 + len(ev.Type) + len(ev.ConvID) + len(ev.Data)
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, `{"cursor":`...)
	dst = strconv.AppendInt(dst, resp.Cursor, 10)
	dst = append(dst, `,"events":[`...)
	for i := range resp.Events {
		if i > 0 {
			dst = append(dst, ',')
		}
		ev := &resp.Events[i]
		dst = append(dst, `{"cursor":`...)
		dst = strconv.AppendInt(dst, ev.Cursor, 10)
		dst = appendEventTail(dst, ev.Type, ev.ConvID, ev.TS, ev.Data)
		dst = dst[:len(dst)-1] // appendEventTail closes the push frame too: one } is the event's
	}
	dst = append(dst, `],"has_more":`...)
	dst = strconv.AppendBool(dst, resp.HasMore)
	dst = append(dst, `,"mark":`...)
	dst = strconv.AppendInt(dst, resp.Mark, 10)
	if len(resp.Conversations) > 0 {
		// Few, and rare (large groups' news): encoding/json is fast enough for them.
		convs, err := json.Marshal(resp.Conversations)
		if err != nil {
			panic(fmt.Sprintf("gateway: encode conversation briefs: %v", err)) // plain structs: cannot fail
		}
		dst = append(append(dst, `,"conversations":`...), convs...)
	}
	return append(dst, '}')
}

// appendSyncEventPush appends the push frame of ev, an event read from the log (whose body
// no other recipient shares), as appendEventPush does for hub.EventOf(ev), without the body
// and the copy of the frame's tail that a fanout shares: a catch-up pushes thousands.
func appendSyncEventPush(dst []byte, ev *protocol.SyncEvent) []byte {
	dst = slices.Grow(dst, len(eventHead)+20+70+len(ev.Type)+len(ev.ConvID)+len(ev.Data))
	dst = append(dst, eventHead...)
	dst = strconv.AppendInt(dst, ev.Cursor, 10)
	return appendEventTail(dst, ev.Type, ev.ConvID, ev.TS, ev.Data)
}

// encodeErrorPush returns {"op":"error","code":code,"error":msg}, sent before a close.
func encodeErrorPush(code int, msg string) []byte {
	b, _ := json.Marshal(protocol.PushFrame{Op: protocol.OpError, Code: code, Error: msg}) // always marshals
	return b
}

// appendNoticePush appends the notice push of n with pull delay delayMS to dst: the bytes
// json.Marshal of a protocol.NoticePush gives. Every online member of a large group gets
// one per message burst, each with its own unread count and delay, so it is built by hand.
func appendNoticePush(dst []byte, n hub.Notice, delayMS int64) []byte {
	dst = append(dst, `{"op":"notice","conv_id":`...)
	dst = protocol.AppendString(dst, n.ConvID)
	dst = append(dst, `,"max_seq":`...)
	dst = strconv.AppendInt(dst, n.MaxSeq, 10)
	dst = append(dst, `,"unread":`...)
	dst = strconv.AppendInt(dst, n.Unread, 10)
	dst = append(dst, `,"pull_delay_ms":`...)
	dst = strconv.AppendInt(dst, delayMS, 10)
	return append(dst, '}')
}
