package protocol

import (
	"bytes"
	"strconv"
)

// The readers of this file decode the server frames a client receives most often, every
// message push and its data and the reply to every send, without reflection when they are laid out exactly as the
// Parley server writes them (json.Marshal's field order, no white space, identifiers that
// need no escaping). Anything else is left to encoding/json, so they are fast paths, never
// a second definition of the wire format: whenever one of them reads a frame, it gives what
// json.Unmarshal gives for it (FuzzReadEventPush, FuzzReadMessage and FuzzReadAck hold them
// to that).

// eventPushHead is how the server starts every event push (internal/gateway appendEventPush).
const eventPushHead = `{"op":"event","event":{"cursor":`

// ReadEventPush reads an event push, {"op":"event","event":{...}}, as the server lays it out:
// ok is false for any other frame, which the caller then decodes with encoding/json. When ok
// is true, ev is the Event that json.Unmarshal gives for the frame as a PushFrame, and
// ev.Data is a slice of data, not a copy.
func ReadEventPush(data []byte) (ev SyncEvent, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(eventPushHead))
	if !ok {
		return ev, false
	}
	var typ, conv []byte
	if ev.Cursor, rest, ok = cutInt(rest, 64); !ok {
		return ev, false
	}
	if typ, rest, ok = cutMember(rest, `,"type":`); !ok {
		return ev, false
	}
	if conv, rest, ok = cutMember(rest, `,"conv_id":`); !ok {
		return ev, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"ts":`)); !ok {
		return ev, false
	}
	if ev.TS, rest, ok = cutInt(rest, 64); !ok {
		return ev, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"data":`)); !ok {
		return ev, false
	}
	if rest, ok = bytes.CutSuffix(rest, []byte(`}}`)); !ok || !isValue(rest) {
		return ev, false
	}
	ev.Type, ev.ConvID, ev.Data = eventType(typ), string(conv), rest
	return ev, true
}

// ReadMessage reads the data of a message event as the server lays it out, as readMessage
// does: ok is false for anything else, which the caller then decodes with encoding/json.
// A node reads with it the messages other nodes hand it (internal/chat) before it encodes
// them again for its sockets.
func ReadMessage(data []byte) (m Message, ok bool) { return readMessage(data) }

// readMessage reads the data of a message event as the server lays it out (protocol.Message
// through json.Marshal, with a null extra): ok is false for anything else. Content is a copy.
func readMessage(data []byte) (m Message, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"conv_id":`))
	if !ok {
		return m, false
	}
	var s []byte
	if s, rest, ok = cutString(rest); !ok {
		return m, false
	}
	m.ConvID = string(s)
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return m, false
	}
	if m.Seq, rest, ok = cutInt(rest, 64); !ok {
		return m, false
	}
	if s, rest, ok = cutMember(rest, `,"msg_id":`); !ok {
		return m, false
	}
	m.MsgID = string(s)
	if s, rest, ok = cutMember(rest, `,"client_msg_id":`); !ok {
		return m, false
	}
	m.ClientMsgID = string(s)
	if s, rest, ok = cutMember(rest, `,"sender_id":`); !ok {
		return m, false
	}
	m.SenderID = string(s)
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"content_type":`)); !ok {
		return m, false
	}
	var ct int64
	if ct, rest, ok = cutInt(rest, strconv.IntSize); !ok {
		return m, false
	}
	m.ContentType = int(ct)
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"content":`)); !ok {
		return m, false
	}
	// The content is any JSON value: read what follows it from the end.
	switch {
	case bytes.HasSuffix(rest, []byte(`,"recalled":false}`)):
		rest = rest[:len(rest)-len(`,"recalled":false}`)]
	case bytes.HasSuffix(rest, []byte(`,"recalled":true}`)):
		rest, m.Recalled = rest[:len(rest)-len(`,"recalled":true}`)], true
	default:
		return m, false
	}
	i := len(rest)
	for i > 0 && rest[i-1] >= '0' && rest[i-1] <= '9' {
		i--
	}
	if i > 0 && rest[i-1] == '-' {
		i--
	}
	var tail []byte
	if m.CreatedAt, tail, ok = cutInt(rest[i:], 64); !ok || len(tail) > 0 {
		return m, false
	}
	content, ok := bytes.CutSuffix(rest[:i], []byte(`,"extra":null,"created_at":`))
	if !ok || !isValue(content) {
		return m, false
	}
	m.Content = bytes.Clone(content)
	return m, true
}

// ReadAck reads the reply to a send as the server lays it out, {"id":...,"code":0, and the
// MessageAck's other fields}: ok is false for any other frame, which the caller then decodes
// with encoding/json. When ok is true, id is the ReplyFrame's ID and ack the MessageAck
// (with Code 0) that json.Unmarshal gives for the frame.
func ReadAck(data []byte) (id string, ack MessageAck, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"id":`))
	if !ok {
		return "", ack, false
	}
	var rid, s []byte
	if rid, rest, ok = cutString(rest); !ok {
		return "", ack, false
	}
	if s, rest, ok = cutMember(rest, `,"code":0,"conv_id":`); !ok {
		return "", ack, false
	}
	ack.ConvID = string(s)
	if s, rest, ok = cutMember(rest, `,"client_msg_id":`); !ok {
		return "", ack, false
	}
	ack.ClientMsgID = string(s)
	if s, rest, ok = cutMember(rest, `,"msg_id":`); !ok {
		return "", ack, false
	}
	ack.MsgID = string(s)
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return "", ack, false
	}
	if ack.Seq, rest, ok = cutInt(rest, 64); !ok {
		return "", ack, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"created_at":`)); !ok {
		return "", ack, false
	}
	if ack.CreatedAt, rest, ok = cutInt(rest, 64); !ok {
		return "", ack, false
	}
	switch string(rest) {
	case `,"duplicate":false}`:
	case `,"duplicate":true}`:
		ack.Duplicate = true
	default:
		return "", ack, false
	}
	return string(rid), ack, true
}

// cutMember reads the member name (a literal such as `,"type":`) and then a string.
func cutMember(b []byte, name string) (s, rest []byte, ok bool) {
	if rest, ok = bytes.CutPrefix(b, []byte(name)); !ok {
		return nil, b, false
	}
	return cutString(rest)
}

// cutString reads a JSON string of printable ASCII without escapes, which decodes to its
// bytes as they are; ok is false for any other string.
func cutString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, b, false
		}
	}
	return nil, b, false
}

// cutInt reads a JSON integer that fits bits: -?(0|[1-9][0-9]*), not followed by a
// fraction or an exponent.
func cutInt(b []byte, bits int) (n int64, rest []byte, ok bool) {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == start || (b[start] == '0' && i > start+1) {
		return 0, b, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, b, false
	}
	n, err := strconv.ParseInt(string(b[:i]), 10, bits)
	if err != nil {
		return 0, b, false
	}
	return n, b[i:], true
}

// isValue reports whether b is exactly one JSON value, without white space around it: the
// values json.Valid accepts, checked in one pass without its scanner's call per byte
// (FuzzIsValue holds it to json.Valid).
func isValue(b []byte) bool {
	if len(b) == 0 || isSpace(b[0]) || isSpace(b[len(b)-1]) {
		return false
	}
	end, ok := skipValue(b, 0, 1)
	return ok && end == len(b)
}

// maxDepth is the deepest nesting json.Valid accepts (encoding/json's maxNestingDepth).
const maxDepth = 10000

// skipValue returns the index just past the JSON value that starts at b[i], and whether
// there is a valid one there; depth is the nesting of that value, 1 for the outermost.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		if depth > maxDepth {
			return i, false
		}
		return skipContainer(b, i, depth)
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return i, false
}

// skipContainer skips the object or array that starts at b[i].
func skipContainer(b []byte, i, depth int) (int, bool) {
	object, closing := b[i] == '{', byte(']')
	if object {
		closing = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		if object {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			if i, ok = skipString(b, i); !ok {
				return i, false
			}
			if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
		}
		if i, ok = skipValue(b, i, depth+1); !ok {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case closing:
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

// skipString skips the string that starts at b[i] (a quote). Like encoding/json, it takes
// any byte from 0x20 up as it is, valid UTF-8 or not.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// skipNumber skips the number that starts at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		start := i + 1
		if i = skipDigits(b, start); i == start {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		if i = skipDigits(b, start); i == start {
			return i, false
		}
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// eventType returns the event type named by b, without allocating for the known ones.
func eventType(b []byte) string {
	switch string(b) {
	case EventMessage:
		return EventMessage
	case EventRead:
		return EventRead
	case EventDelivered:
		return EventDelivered
	case EventRecall:
		return EventRecall
	case EventConvDeleted:
		return EventConvDeleted
	case EventConvUpdated:
		return EventConvUpdated
	}
	return string(b)
}

// messagePushHead is how the server starts the push of a read-fanout message (section 10).
const messagePushHead = `{"op":"message","message":`

// ReadMessagePush reads the push of a read-fanout message, {"op":"message","message":{...}},
// as the server lays it out: ok is false for any other frame, which the caller then decodes
// with encoding/json. When ok is true, m is what json.Unmarshal gives for the frame's
// message (FuzzReadMessagePush).
func ReadMessagePush(data []byte) (m MessagePush, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(messagePushHead))
	if !ok {
		return m, false
	}
	inner, ok := bytes.CutSuffix(rest, []byte("}"))
	if !ok {
		return m, false
	}
	if m.Message, ok = readMessage(inner); !ok {
		return m, false
	}
	m.Op = OpMessage
	return m, true
}

// ReadNoticePush reads a notice, {"op":"notice","conv_id":...,"max_seq":N,"unread":N,
// "pull_delay_ms":N}, as the server lays it out: ok is false for anything else
// (FuzzReadNoticePush holds it to encoding/json). A large group's online members get one a
// second each, so a load generator reads tens of thousands a second.
func ReadNoticePush(data []byte) (n NoticePush, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"op":"notice","conv_id":"`))
	if !ok {
		return n, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || !ValidConvID(string(rest[:i])) {
		return n, false
	}
	n.ConvID, rest = string(rest[:i]), rest[i+1:]
	for _, f := range []struct {
		name string
		v    *int64
	}{{`,"max_seq":`, &n.MaxSeq}, {`,"unread":`, &n.Unread}, {`,"pull_delay_ms":`, &n.PullDelayMS}} {
		if rest, ok = bytes.CutPrefix(rest, []byte(f.name)); !ok {
			return n, false
		}
		if *f.v, rest, ok = cutInt(rest, 64); !ok {
			return n, false
		}
	}
	if string(rest) != "}" {
		return n, false
	}
	n.Op = OpNotice
	return n, true
}
