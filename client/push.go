package client

import (
	"github.com/parleychat/parley/internal/wirejson"
	"github.com/parleychat/parley/protocol"
)

// decodePush decodes an event push in the layout the server writes it,
// {"op":"event","event":{"cursor","type","conv_id","ts","data"}} without white space, without
// reflection: a catch-up pushes thousands of them, and decoding them with encoding/json cost
// a client more than everything else it did with them. ok is false for any other frame, which
// handle decodes with encoding/json; for the frames it accepts, the event is the one
// encoding/json gives, but that its Data aliases frame (readLoop never reuses a frame's
// buffer).
func decodePush(frame []byte) (ev SyncEvent, ok bool) {
	b, ok := wirejson.Prefix(frame, `{"op":"event","event":{"cursor":`)
	if ok {
		ev.Cursor, b, ok = wirejson.Int(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"type":`)
	}
	if ok {
		ev.Type, b, ok = wirejson.String(b, protocol.EventMessage)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"conv_id":`)
	}
	if ok {
		ev.ConvID, b, ok = wirejson.String(b, "")
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"ts":`)
	}
	if ok {
		ev.TS, b, ok = wirejson.Int(b)
	}
	if ok {
		b, ok = wirejson.Prefix(b, `,"data":`)
	}
	if ok {
		ev.Data, b, ok = wirejson.Value(b)
	}
	if !ok || string(b) != "}}" {
		return SyncEvent{}, false
	}
	return ev, true
}
