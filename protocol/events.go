package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrEventType is returned (wrapped) by SyncEvent's typed accessors when the event is of
// another type: check Type first, or switch on it.
var ErrEventType = errors.New("protocol: event of another type")

// Message returns the data of a "message" event: the message as it is now (a later recall
// shows as Recalled with null content). ConvID is filled from the event if data lacks it.
func (e SyncEvent) Message() (Message, error) {
	m, ok := Message{}, false
	if e.Type == EventMessage {
		m, ok = decodeMessage(e.Data)
	}
	var err error
	if !ok {
		m, err = eventData[Message](e, EventMessage)
	}
	if err == nil && m.ConvID == "" {
		m.ConvID = e.ConvID
	}
	return m, err
}

// Read returns the data of a "read" event.
func (e SyncEvent) Read() (ReadData, error) { return eventData[ReadData](e, EventRead) }

// Delivered returns the data of a "delivered" event.
func (e SyncEvent) Delivered() (DeliveredData, error) {
	return eventData[DeliveredData](e, EventDelivered)
}

// Recall returns the data of a "recall" event.
func (e SyncEvent) Recall() (RecallData, error) { return eventData[RecallData](e, EventRecall) }

// ConvDeleted returns the data of a "conv_deleted" event.
func (e SyncEvent) ConvDeleted() (ConvDeletedData, error) {
	return eventData[ConvDeletedData](e, EventConvDeleted)
}

// ConvUpdated returns the data of a "conv_updated" event: the conversation as the recipient
// saw it when the event was emitted. ConvID is filled from the event if data lacks it.
func (e SyncEvent) ConvUpdated() (ConversationBrief, error) {
	b, err := eventData[ConversationBrief](e, EventConvUpdated)
	if err == nil && b.ConvID == "" {
		b.ConvID = e.ConvID
	}
	return b, err
}

// eventData decodes e.Data as T after checking that e is of type typ, so that a caller never
// reads a read event's data as a message by mistake.
func eventData[T any](e SyncEvent, typ string) (T, error) {
	var v T
	if e.Type != typ {
		return v, fmt.Errorf("%w: want %q, event %d is %q", ErrEventType, typ, e.Cursor, e.Type)
	}
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return v, fmt.Errorf("protocol: decode %s event %d: %w", typ, e.Cursor, err)
	}
	return v, nil
}
