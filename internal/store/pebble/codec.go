package pebble

import (
	"encoding/binary"

	"github.com/parleychat/parley/internal/store"
)

// Values are encoded by hand rather than as JSON: a message send encodes and decodes a
// handful of rows, and reflection-free varints keep that to a few hundred nanoseconds and
// a few bytes per field. The field order below is the format: changing it needs a new
// layoutVersion.

func appendVarint(b []byte, x int64) []byte { return binary.AppendVarint(b, x) }

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// appendOptBytes writes len+1, or 0 for nil, so that nil and empty stay distinct.
func appendOptBytes(b []byte, p []byte) []byte {
	if p == nil {
		return append(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(p))+1), p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// decoder reads a value; the first malformed field sets err and every later read returns
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err, d.b = errCorrupt, nil }

func (d *decoder) varint() int64 {
	x, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *decoder) length() (int, bool) {
	x, n := binary.Uvarint(d.b)
	if n <= 0 || x > uint64(len(d.b)-n) {
		d.fail()
		return 0, false
	}
	d.b = d.b[n:]
	return int(x), true
}

func (d *decoder) string() string {
	n, ok := d.length()
	if !ok {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) optBytes() []byte {
	x, n := binary.Uvarint(d.b)
	if n <= 0 || (x > 0 && x-1 > uint64(len(d.b)-n)) {
		d.fail()
		return nil
	}
	d.b = d.b[n:]
	if x == 0 {
		return nil
	}
	p := make([]byte, x-1)
	copy(p, d.b)
	d.b = d.b[x-1:]
	return p
}

func (d *decoder) bool() bool {
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// done reports a malformed value, including trailing bytes.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return d.err
}

func encodeUser(b []byte, u store.User) []byte {
	b = appendString(b, u.Name)
	b = appendVarint(b, u.TokenGen)
	b = appendVarint(b, u.CreatedAt)
	if u.PresenceHidden {
		// Only a user who hides their presence carries it: a record without it (every
		// record of earlier versions) reads as visible.
		b = appendBool(b, true)
	}
	return b
}

func decodeUser(v []byte, id string) (store.User, error) {
	d := decoder{b: v}
	u := store.User{ID: id, Name: d.string(), TokenGen: d.varint(), CreatedAt: d.varint()}
	if d.err == nil && len(d.b) > 0 {
		u.PresenceHidden = d.bool()
	}
	return u, d.done()
}

func encodeBounds(b []byte, c store.CursorBounds) []byte {
	return appendVarint(appendVarint(b, c.Last), c.Pruned)
}

func decodeBounds(v []byte) (store.CursorBounds, error) {
	d := decoder{b: v}
	c := store.CursorBounds{Last: d.varint(), Pruned: d.varint()}
	return c, d.done()
}

func encodeConversation(b []byte, c store.Conversation) []byte {
	b = appendString(b, c.Type)
	b = appendString(b, c.Name)
	b = appendString(b, c.OwnerID)
	b = appendBool(b, c.ReadDetail)
	b = appendVarint(b, c.MaxSeq)
	b = appendVarint(b, int64(c.MembersCount))
	b = appendVarint(b, c.CreatedAt)
	b = appendVarint(b, c.UpdatedAt)
	if c.ReadFrom != 0 || c.RetentionMS != 0 {
		// Only read-fanout conversations carry these, so a write-fanout row keeps the bytes
		// of earlier versions and they still read it.
		b = appendVarint(appendVarint(b, c.ReadFrom), c.Mark)
	}
	if c.RetentionMS != 0 {
		// Likewise only a group with its own retention carries it: a record without it
		// (every record of earlier versions) reads as 0, the operator's.
		b = appendVarint(b, c.RetentionMS)
	}
	return b
}

func decodeConversation(v []byte, id string) (store.Conversation, error) {
	d := decoder{b: v}
	c := store.Conversation{ID: id}
	c.Type = d.string()
	c.Name = d.string()
	c.OwnerID = d.string()
	c.ReadDetail = d.bool()
	c.MaxSeq = d.varint()
	c.MembersCount = int(d.varint())
	c.CreatedAt = d.varint()
	c.UpdatedAt = d.varint()
	if d.err == nil && len(d.b) > 0 {
		c.ReadFrom, c.Mark = d.varint(), d.varint()
	}
	if d.err == nil && len(d.b) > 0 {
		c.RetentionMS = d.varint()
	}
	return c, d.done()
}

func encodeMember(b []byte, m store.Member) []byte {
	b = appendVarint(b, m.JoinedAt)
	b = appendVarint(b, m.Ordinal)
	b = appendVarint(b, m.JoinSeq)
	b = appendVarint(b, m.ClearedSeq)
	b = appendVarint(b, m.ReadSeq)
	b = appendVarint(b, m.DeliveredSeq)
	return appendBool(b, m.Hidden)
}

func decodeMember(v []byte, conv, user string) (store.Member, error) {
	d := decoder{b: v}
	m := store.Member{ConvID: conv, UserID: user}
	m.JoinedAt = d.varint()
	m.Ordinal = d.varint()
	m.JoinSeq = d.varint()
	m.ClearedSeq = d.varint()
	m.ReadSeq = d.varint()
	m.DeliveredSeq = d.varint()
	m.Hidden = d.bool()
	return m, d.done()
}

func encodeMessage(b []byte, m store.Message) []byte {
	b = appendString(b, m.MsgID)
	b = appendString(b, m.ClientMsgID)
	b = appendString(b, m.SenderID)
	b = appendVarint(b, int64(m.ContentType))
	b = appendOptBytes(b, m.Content)
	b = appendOptBytes(b, m.Extra)
	b = appendVarint(b, m.CreatedAt)
	b = appendBool(b, m.Recalled)
	if len(m.Mentions) > 0 || m.AttachmentID != "" {
		// Only messages with mentions or an attachment carry them, so a message without
		// keeps the bytes of earlier versions and they still read it. The attachment comes
		// after the mentions, whose count is then written even when it is 0.
		b = binary.AppendUvarint(b, uint64(len(m.Mentions)))
		for _, u := range m.Mentions {
			b = appendString(b, u)
		}
		if m.AttachmentID != "" {
			b = appendString(b, m.AttachmentID)
		}
	}
	return b
}

func decodeMessage(v []byte, conv string, seq int64) (store.Message, error) {
	d := decoder{b: v}
	m := store.Message{ConvID: conv, Seq: seq}
	m.MsgID = d.string()
	m.ClientMsgID = d.string()
	m.SenderID = d.string()
	m.ContentType = int(d.varint())
	m.Content = d.optBytes()
	m.Extra = d.optBytes()
	m.CreatedAt = d.varint()
	m.Recalled = d.bool()
	if d.err == nil && len(d.b) > 0 {
		if n, ok := d.length(); ok && n > 0 { // each mention takes a byte at least
			m.Mentions = make([]string, n)
			for i := range m.Mentions {
				m.Mentions[i] = d.string()
			}
		} else if ok && len(d.b) == 0 {
			d.fail() // an empty list without an attachment is written as none
		}
		if d.err == nil && len(d.b) > 0 {
			if m.AttachmentID = d.string(); m.AttachmentID == "" {
				d.fail() // no attachment is written as none
			}
		}
	}
	return m, d.done()
}

func encodeAttachment(b []byte, a store.Attachment) []byte {
	b = appendString(b, a.OwnerID)
	b = appendVarint(b, int64(a.State))
	b = appendVarint(b, a.Size)
	b = appendVarint(b, a.CreatedAt)
	b = appendString(b, a.MimeType)
	b = appendString(b, a.SHA256)
	b = appendVarint(b, int64(a.Width))
	b = appendVarint(b, int64(a.Height))
	b = appendVarint(b, a.DurationMS)
	b = appendBool(b, a.Thumbnail)
	b = appendString(b, a.Preview)
	b = appendVarint(b, a.CompletedAt)
	b = appendVarint(b, a.Refs)
	return appendVarint(b, a.IdleSince)
}

func decodeAttachment(v []byte, id string) (store.Attachment, error) {
	d := decoder{b: v}
	a := store.Attachment{ID: id}
	a.OwnerID = d.string()
	a.State = store.AttachmentState(d.varint())
	a.Size = d.varint()
	a.CreatedAt = d.varint()
	a.MimeType = d.string()
	a.SHA256 = d.string()
	a.Width = int(d.varint())
	a.Height = int(d.varint())
	a.DurationMS = d.varint()
	a.Thumbnail = d.bool()
	a.Preview = d.string()
	a.CompletedAt = d.varint()
	a.Refs = d.varint()
	a.IdleSince = d.varint()
	return a, d.done()
}

func encodeEvent(b []byte, e store.Event) []byte {
	b = appendString(b, e.Type)
	b = appendString(b, e.ConvID)
	b = appendVarint(b, e.TS)
	b = appendVarint(b, e.Seq)
	return appendOptBytes(b, e.Data)
}

func decodeEvent(v []byte, user string, cursor int64) (store.Event, error) {
	d := decoder{b: v}
	e := store.Event{UserID: user, Cursor: cursor}
	e.Type = d.string()
	e.ConvID = d.string()
	e.TS = d.varint()
	e.Seq = d.varint()
	e.Data = d.optBytes()
	return e, d.done()
}

func encodePushTarget(b []byte, p store.PushTarget) []byte {
	b = appendString(b, p.Provider)
	b = appendString(b, p.Token)
	b = appendString(b, p.Topic)
	b = appendString(b, p.Locale)
	b = appendVarint(b, p.RegisteredAt)
	return appendVarint(b, p.Cursor)
}

func decodePushTarget(v []byte, user, device string) (store.PushTarget, error) {
	d := decoder{b: v}
	p := store.PushTarget{UserID: user, DeviceID: device}
	p.Provider = d.string()
	p.Token = d.string()
	p.Topic = d.string()
	p.Locale = d.string()
	p.RegisteredAt = d.varint()
	p.Cursor = d.varint()
	return p, d.done()
}

func encodeMute(b []byte, m store.Mute) []byte { return appendVarint(b, m.Until) }

func decodeMute(v []byte, user, conv string) (store.Mute, error) {
	d := decoder{b: v}
	m := store.Mute{UserID: user, ConvID: conv, Until: d.varint()}
	return m, d.done()
}

func encodeSegment(b []byte, s store.Segment) []byte {
	b = appendString(b, s.ConvID)
	b = appendVarint(b, s.FirstSeq)
	b = appendVarint(b, s.LastSeq)
	b = appendVarint(b, s.FirstTS)
	b = appendVarint(b, s.LastTS)
	b = appendVarint(b, int64(s.Count))
	b = appendVarint(b, s.Bytes)
	b = appendVarint(b, s.RawBytes)
	b = appendVarint(b, s.CreatedAt)
	return appendBool(b, s.Sealed)
}

func decodeSegment(v []byte, key string) (store.Segment, error) {
	d := decoder{b: v}
	s := store.Segment{Key: key}
	s.ConvID = d.string()
	s.FirstSeq = d.varint()
	s.LastSeq = d.varint()
	s.FirstTS = d.varint()
	s.LastTS = d.varint()
	s.Count = int(d.varint())
	s.Bytes = d.varint()
	s.RawBytes = d.varint()
	s.CreatedAt = d.varint()
	s.Sealed = d.bool()
	return s, d.done()
}
