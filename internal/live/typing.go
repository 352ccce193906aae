package live

import (
	"encoding/json"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/protocol"
)

// TypingBody is the hub body of a write-fanout typing push: typerID started (on) or
// stopped typing in convID. It is in no log (Cursor 0): its Data is the whole frame.
func TypingBody(convID, typerID string, on bool) (*hub.Body, bool) {
	p := protocol.TypingPush{Op: protocol.OpTyping, ConvID: convID, UserID: typerID, State: protocol.TypingStopped}
	if on {
		p.State, p.ExpiresInMS = protocol.TypingStarted, protocol.TypingExpiresMS
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, false // cannot happen: strings and numbers
	}
	return &hub.Body{Type: protocol.OpTyping, ConvID: convID, Data: data}, true
}

// Typing hands userID's connections on the other nodes a write-fanout typing push: typerID
// started (on) or stopped typing in convID. Each node encodes the frame itself.
func (c *Cluster) Typing(userID, convID, typerID string, on bool) {
	c.publish(bus.UserSubject(userID), busMsg{Kind: kindTyping, Conv: convID, User: typerID, Type: typingState(on)})
}

// RoomTyping hands the other nodes' rooms of the read-fanout conversation convID a typing
// change of typerID, which each times and pushes by itself (hub.Typing).
func (c *Cluster) RoomTyping(convID, typerID string, on bool) {
	c.publish(bus.ConvSubject(convID), busMsg{Kind: kindTyping, User: typerID, Type: typingState(on)})
}

func typingState(on bool) string {
	if on {
		return protocol.TypingStarted
	}
	return protocol.TypingStopped
}

// typingOf checks a typing message of the bus: a valid typer and a state; on is the state.
func typingOf(m *busMsg) (on, ok bool) {
	if !protocol.ValidUserID(m.User) || (m.Type != protocol.TypingStarted && m.Type != protocol.TypingStopped) {
		return false, false
	}
	return m.Type == protocol.TypingStarted, true
}

// onUserTyping pushes a write-fanout typing change another node sent to userID's
// connections here.
func (c *Cluster) onUserTyping(userID string, m *busMsg) {
	on, ok := typingOf(m)
	if !ok || !protocol.ValidConvID(m.Conv) {
		c.reject(rejectInvalid)
		return
	}
	if b, ok := TypingBody(m.Conv, m.User, on); ok {
		c.hub.Publish(userID, []hub.Event{{Body: b}})
	}
}

// onRoomTyping hands a read-fanout typing change another node sent to convID's room here.
func (c *Cluster) onRoomTyping(convID string, m *busMsg) {
	on, ok := typingOf(m)
	if !ok {
		c.reject(rejectInvalid)
		return
	}
	c.hub.Typing(convID, m.User, on)
}
