package live

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// AppendMessageJSON appends json.Marshal(WireMessage(*m)) to dst without reflection: a
// catch-up encodes thousands of messages, and the reflective encoder (and the decode of
// Extra into a map and back) was most of its encoding time. The output is byte for byte
// the reflective one's: strings are quoted as json.Marshal quotes them
// (protocol.AppendString), and whatever else the fast path does not cover exactly (content
// or extra with characters that encoding/json escapes) goes through json.Marshal.
// ok is false when json.Marshal would fail (stored content that is not JSON); dst is then
// returned unchanged.
func AppendMessageJSON(dst []byte, m *store.Message) (out []byte, ok bool) {
	start := len(dst)
	dst = append(dst, `{"conv_id":`...)
	dst = protocol.AppendString(dst, m.ConvID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, m.Seq, 10)
	dst = append(dst, `,"msg_id":`...)
	dst = protocol.AppendString(dst, m.MsgID)
	dst = append(dst, `,"client_msg_id":`...)
	dst = protocol.AppendString(dst, m.ClientMsgID)
	dst = append(dst, `,"sender_id":`...)
	dst = protocol.AppendString(dst, m.SenderID)
	dst = append(dst, `,"content_type":`...)
	dst = strconv.AppendInt(dst, int64(m.ContentType), 10)
	dst = append(dst, `,"content":`...)
	dst, contentOK := appendRawJSON(dst, m.Content)
	dst = append(dst, `,"extra":`...)
	dst, extraOK := appendExtraJSON(dst, m.Extra)
	dst = append(dst, `,"created_at":`...)
	dst = strconv.AppendInt(dst, m.CreatedAt, 10)
	dst = append(dst, `,"recalled":`...)
	dst = strconv.AppendBool(dst, m.Recalled)
	if len(m.Mentions) > 0 { // omitted when empty, as the field's omitempty does
		dst = append(dst, `,"mentions":[`...)
		for i, u := range m.Mentions {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = protocol.AppendString(dst, u)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, '}')
	if contentOK && extraOK {
		return dst, true
	}
	b, err := json.Marshal(WireMessage(*m))
	if err != nil {
		return dst[:start], false
	}
	return append(dst[:start], b...), true
}

// EncodeExtra encodes extra for storage, without HTML escaping to keep it compact.
func EncodeExtra(extra map[string]string) []byte {
	if extra == nil {
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(extra) // a map of strings always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// WireMessage converts a stored message to its wire form.
func WireMessage(m store.Message) protocol.Message {
	w := protocol.Message{
		ConvID: m.ConvID, Seq: m.Seq, MsgID: m.MsgID, ClientMsgID: m.ClientMsgID,
		SenderID: m.SenderID, ContentType: m.ContentType, CreatedAt: m.CreatedAt, Recalled: m.Recalled,
		Mentions: m.Mentions,
	}
	if len(m.Content) > 0 {
		w.Content = json.RawMessage(m.Content)
	}
	if len(m.Extra) > 0 {
		_ = json.Unmarshal(m.Extra, &w.Extra) // written by Send from a map[string]string
	}
	return w
}

// appendRawJSON appends raw as json.Marshal encodes a json.RawMessage: null when empty,
// otherwise compacted. It returns false when raw is not JSON, or holds characters that
// encoding/json escapes for HTML (<, >, &, U+2028, U+2029), which the caller leaves to
// json.Marshal.
func appendRawJSON(dst []byte, raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return append(dst, "null"...), true
	}
	b := bytes.NewBuffer(dst)
	if err := json.Compact(b, raw); err != nil {
		return dst, false
	}
	out := b.Bytes()
	return out, !needsHTMLEscape(out[len(dst):])
}

// appendExtraJSON appends extra, as chat stores it (EncodeExtra: a map[string]string encoded
// with sorted keys and without HTML escaping), the way json.Marshal encodes that map after
// WireMessage decoded it: the same bytes unless they hold an escape sequence (decoding
// "\ufffd" gives a rune that json.Marshal writes as it is) or characters that json.Marshal
// escapes for HTML, for which it returns false.
func appendExtraJSON(dst []byte, extra []byte) ([]byte, bool) {
	if len(extra) == 0 {
		return append(dst, "null"...), true
	}
	if bytes.IndexByte(extra, '\\') >= 0 || needsHTMLEscape(extra) {
		return dst, false
	}
	return append(dst, extra...), true
}

// needsHTMLEscape reports whether b holds <, >, &, U+2028 or U+2029 (E2 80 A8, E2 80 A9).
func needsHTMLEscape(b []byte) bool {
	for i, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&':
			return true
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			return true
		}
	}
	return false
}
