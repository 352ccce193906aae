package live

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// What a node believes of the other nodes' messages. The bus is sealed (only the nodes hold
// its key), but a node still treats what comes from it as input from outside: a sender
// that holds the key may be compromised, or may run a build with a bug. So nothing from the
// bus reaches a socket as it came:
//
//   - a message (an event of a user's log, or a read-fanout conversation's push) is decoded
//     into its typed fields, each checked for its documented form, and encoded again by
//     this node's own encoder (AppendMessageJSON); its conversation must be the one the bus
//     message names (the subject, for a room's);
//   - a receipts push is carried as its typed counts, checked, and encoded here;
//   - a revocation is a hint to read the user's token generation from the store, which is
//     what the node acts on (onRevoke, then chat's Revocations);
//   - "device connected" must name a device in the id's form, at a time not ahead of this
//     node's clock by more than deviceSkew.
//
// Anything else is dropped and counted (Observer.BusRejected, "invalid"; "malformed" for
// what is not a bus message at all). What a node holding the key can still do, a store
// cannot tell cheaply: a well-formed message event at a user's next cursor, or a "device
// connected" that ends a connection (docs/design.md, "What a node believes").

// The reasons a node refuses a message of the bus (parley_bus_rejected_total{reason}).
const (
	rejectMalformed = bus.RejectMalformed // not a bus message of Parley
	rejectInvalid   = bus.RejectInvalid   // a bus message whose fields do not hold
)

// busRejecter is what an Observer may also implement to count the bus messages refused.
type busRejecter interface{ BusRejected(reason string) }

// deviceSkew is how far ahead of this node's clock a "device connected" may be dated: the
// nodes' clocks differ a little, but a connection opened in the future is a forgery that
// would end every connection the device opens until then.
const deviceSkew = 5 * time.Second

// maxMessageBytes bounds a message's payload from the bus: its push must fit in a frame.
const maxMessageBytes = protocol.MaxFrameBytes

// reject counts a bus message refused for reason.
func (c *Cluster) reject(reason string) {
	if o, ok := c.obs.(busRejecter); ok {
		o.BusRejected(reason)
	}
}

// validPos reports whether n is a seq, cursor or time in its documented range: 1 to 2^53-1.
func validPos(n int64) bool { return n >= 1 && n <= protocol.MaxSafeInteger }

// busMessage decodes data, the payload of a message of convID from another node, checks
// every field, and returns the message with its payload encoded again by this node. ok is
// false for anything that is not such a message.
func busMessage(convID string, data []byte) (m store.Message, payload []byte, ok bool) {
	if len(data) > maxMessageBytes {
		return m, nil, false
	}
	w, fast := protocol.ReadMessage(data)
	if !fast {
		w = protocol.Message{}
		if json.Unmarshal(data, &w) != nil {
			return m, nil, false
		}
	}
	switch {
	case w.ConvID != convID, !protocol.ValidConvID(w.ConvID), !validPos(w.Seq),
		!protocol.ValidClientMsgID(w.MsgID), !protocol.ValidClientMsgID(w.ClientMsgID),
		!protocol.ValidUserID(w.SenderID), w.ContentType < 1, int64(w.ContentType) > protocol.MaxSafeInteger,
		len(w.Content) == 0, string(w.Content) == "null", !validPos(w.CreatedAt),
		len(w.Mentions) > protocol.MaxMentions:
		return m, nil, false
	}
	for _, u := range w.Mentions {
		if !protocol.ValidUserID(u) {
			return m, nil, false
		}
	}
	m = store.Message{
		ConvID: w.ConvID, Seq: w.Seq, MsgID: w.MsgID, ClientMsgID: w.ClientMsgID, SenderID: w.SenderID,
		ContentType: w.ContentType, Content: w.Content, Extra: EncodeExtra(w.Extra), CreatedAt: w.CreatedAt,
		Recalled: w.Recalled, Mentions: w.Mentions,
	}
	payload, ok = AppendMessageJSON(make([]byte, 0, len(data)+16), &m)
	return m, payload, ok
}

// eventBody is the hub body of the message event m announces (kindEvent), rebuilt from its
// checked fields; ok is false when they do not hold.
func (c *Cluster) eventBody(m *busMsg) (*hub.Body, bool) {
	if m.Type != protocol.EventMessage || !validPos(m.Cursor) {
		return nil, false
	}
	msg, payload, ok := busMessage(m.Conv, m.Data)
	if !ok || msg.CreatedAt != m.TS {
		return nil, false
	}
	return &hub.Body{Type: protocol.EventMessage, ConvID: msg.ConvID, TS: msg.CreatedAt, Data: payload}, true
}

// roomBody is the hub body of the read-fanout message of convID that m hands over
// (kindMessage), rebuilt from its checked fields; ok is false when they do not hold.
func (c *Cluster) roomBody(convID string, m *busMsg) (*hub.Body, bool) {
	msg, payload, ok := busMessage(convID, m.Data)
	if !ok || msg.Seq != m.Seq || msg.SenderID != m.User || msg.CreatedAt != m.TS || len(m.Users) > protocol.MaxMentions+1 {
		return nil, false
	}
	for _, u := range m.Users {
		if !protocol.ValidUserID(u) {
			return nil, false
		}
	}
	return &hub.Body{Type: protocol.OpMessage, ConvID: convID, TS: msg.CreatedAt, Data: MessageFrame(payload), Skip: m.Users}, true
}

// MessageFrame returns the push of a read-fanout message, {"op":"message","message":...},
// around payload, the message's encoding.
func MessageFrame(payload []byte) []byte {
	frame := make([]byte, 0, len(payload)+32)
	frame = append(frame, `{"op":"message","message":`...)
	frame = append(frame, payload...)
	return append(frame, '}')
}

// ReceiptsBody is the hub body of a receipts push of convID with rs, encoded here: of the
// counts this node computed, or of those another node sent once checked (receiptsValid).
func ReceiptsBody(convID string, rs []protocol.Receipts) (*hub.Body, bool) {
	data, err := json.Marshal(protocol.ReceiptsPush{Op: protocol.OpReceipts, ConvID: convID, Receipts: rs})
	if err != nil {
		return nil, false // cannot happen: plain numbers
	}
	return &hub.Body{Type: protocol.OpReceipts, ConvID: convID, Data: data}, true
}

// receiptsValid reports whether m is a receipts push as a node sends one (kindEphemeral):
// of a group, with 1 to MaxReceiptsPushed counts, each of a seq and within its members.
func receiptsValid(m *busMsg) bool {
	if m.Type != protocol.OpReceipts || !protocol.ValidConvID(m.Conv) || !IsGroupID(m.Conv) ||
		len(m.Receipts) == 0 || len(m.Receipts) > protocol.MaxReceiptsPushed {
		return false
	}
	for _, r := range m.Receipts {
		if !validPos(r.Seq) || r.MemberCount < 0 || int64(r.MemberCount) > protocol.MaxSafeInteger ||
			r.ReadCount < 0 || r.ReadCount > r.MemberCount || r.DeliveredCount < 0 ||
			r.DeliveredCount > r.MemberCount || r.Readers != nil {
			return false
		}
	}
	return true
}

// deviceValid reports whether m is a "device connected" as a node sends one (kindDevice):
// a device id, and an opening time not ahead of now by more than deviceSkew.
func deviceValid(m *busMsg, now time.Time) bool {
	return protocol.ValidDeviceID(m.Device) && m.Since > 0 && m.Since <= now.Add(deviceSkew).UnixNano()
}

// readUserMsg reads a wake-up or a message event laid out exactly as Wake and Event write
// them, without reflection: one of them arrives per message per recipient online here.
// ok is false for anything else, which decode reads with encoding/json (the two agree on
// whatever readUserMsg reads: TestReadUserMsgAgreesWithDecode). node is the sender's id,
// a slice of data; m.Data too.
func readUserMsg(data []byte) (m busMsg, node []byte, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"n":"`))
	if !ok {
		return m, nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || !protocol.ValidClientMsgID(string(rest[:i])) { // [a-z0-9_]: no escapes
		return m, nil, false
	}
	node, rest = rest[:i], rest[i+1:]
	switch {
	case bytes.HasPrefix(rest, []byte(`,"k":"`+kindWake+`","c":`)):
		m.Kind = kindWake
		rest = rest[len(`,"k":"`+kindWake+`","c":`):]
		if m.Cursor, rest, ok = cutDigits(rest); !ok || string(rest) != "}" {
			return m, nil, false
		}
		return m, node, true
	case bytes.HasPrefix(rest, []byte(`,"k":"`+kindEvent+`","c":`)):
		m.Kind = kindEvent
		rest = rest[len(`,"k":"`+kindEvent+`","c":`):]
	default:
		return m, nil, false
	}
	if m.Cursor, rest, ok = cutDigits(rest); !ok {
		return m, nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"ts":`)); !ok {
		return m, nil, false
	}
	if m.TS, rest, ok = cutDigits(rest); !ok {
		return m, nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"t":"`+protocol.EventMessage+`","cv":"`)); !ok {
		return m, nil, false
	}
	if i = bytes.IndexByte(rest, '"'); i < 0 || !protocol.ValidConvID(string(rest[:i])) {
		return m, nil, false
	}
	m.Type, m.Conv, rest = protocol.EventMessage, string(rest[:i]), rest[i+1:]
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"d":`)); !ok || len(rest) < 2 || rest[len(rest)-1] != '}' {
		return m, nil, false
	}
	m.Data = rest[:len(rest)-1] // checked by busMessage, which decodes it
	return m, node, true
}

// cutDigits reads a positive integer up to 2^53-1 without a leading zero.
func cutDigits(b []byte) (n int64, rest []byte, ok bool) {
	i := 0
	for i < len(b) && i < 17 && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	if i == 0 || b[0] == '0' || n > protocol.MaxSafeInteger || (i < len(b) && b[i] >= '0' && b[i] <= '9') {
		return 0, b, false
	}
	return n, b[i:], true
}

// roomAhead is how far past the newest seq a room here knows a message from the bus may be
// before the store is asked whether the conversation has it: sends reach the nodes nearly
// in seq order, and a room handed a seq far ahead would take it as its next and push none
// of the real messages below it.
const roomAhead = 1024

// plausibleSeq reports whether seq, a message of convID from the bus, is one its room here
// may take: within roomAhead of what the room knows, or, past that, at most the
// conversation's max_seq in the store (read only then).
func (c *Cluster) plausibleSeq(convID string, seq int64) bool {
	top, known := c.hub.RoomSeq(convID)
	if !known || seq <= top+roomAhead {
		return true
	}
	// A bus delivery has no caller: the owner's lifetime (Tasks) bounds it.
	maxSeq, err := c.convs.MaxSeq(c.tasks.Context(), convID)
	return err == nil && seq <= maxSeq
}
