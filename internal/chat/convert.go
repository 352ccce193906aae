package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

func wireMessages(ms []store.Message) []protocol.Message {
	out := make([]protocol.Message, len(ms))
	for i, m := range ms {
		out[i] = live.WireMessage(m)
	}
	return out
}

// wireEvents converts stored events to their wire form; "message" events carry the message
// (null if it is missing). The message payloads of the page share one buffer, so that a page
// of 1,000 messages costs one allocation for them rather than one or more each.
func wireEvents(es []store.Event) []protocol.SyncEvent {
	out := make([]protocol.SyncEvent, len(es))
	size := 0
	for i := range es {
		if m := es[i].Message; m != nil && es[i].Type == protocol.EventMessage {
			size += messageJSONOverhead + len(m.ConvID) + len(m.MsgID) + len(m.ClientMsgID) +
				len(m.SenderID) + len(m.Content) + len(m.Extra) + mentionsJSONLen(m.Mentions)
		}
	}
	buf := make([]byte, 0, size)
	ends := make([]int, len(es)) // where each event's payload ends in buf
	for i := range es {
		if m := es[i].Message; m != nil && es[i].Type == protocol.EventMessage {
			buf, _ = live.AppendMessageJSON(buf, m) // on failure nothing is appended: data is nil
		}
		ends[i] = len(buf)
	}
	start := 0
	for i, e := range es {
		w := protocol.SyncEvent{Cursor: e.Cursor, Type: e.Type, ConvID: e.ConvID, TS: e.TS, Data: e.Data}
		if e.Type == protocol.EventMessage {
			switch {
			case e.Message == nil:
				w.Data = json.RawMessage("null")
			case ends[i] > start:
				w.Data = buf[start:ends[i]:ends[i]]
			default:
				w.Data = nil // the message did not encode: as json.Marshal's error left it
			}
		}
		start = ends[i]
		out[i] = w
	}
	return out
}

// mentionsJSONLen is about what live.AppendMessageJSON writes for mentions.
func mentionsJSONLen(mentions []string) int {
	if len(mentions) == 0 {
		return 0
	}
	n := len(`,"mentions":[]`)
	for _, u := range mentions {
		n += len(u) + 3 // quotes and comma
	}
	return n
}

// messageJSONOverhead is about what live.AppendMessageJSON adds to a message's variable fields:
// the keys, the numbers and the punctuation.
const messageJSONOverhead = 180

func ackOf(m store.Message, duplicate bool) protocol.MessageAck {
	return protocol.MessageAck{
		ConvID: m.ConvID, ClientMsgID: m.ClientMsgID, MsgID: m.MsgID, Seq: m.Seq,
		CreatedAt: m.CreatedAt, Duplicate: duplicate,
	}
}

func visibleFrom(m store.Member) int64 { return max(m.JoinSeq, m.ClearedSeq) }

// unreadOf is member m's unread count in c: max_seq - max(read_seq, visible_from).
func unreadOf(c store.Conversation, m store.Member) int64 {
	return max(0, c.MaxSeq-max(m.ReadSeq, visibleFrom(m)))
}

// brief builds the conversation as member m sees it. members may be nil; it is read when
// needed (direct conversations, for the peer's positions).
func (s *Service) brief(ctx context.Context, tx store.ReadTx, c store.Conversation, m store.Member, members []store.Member) (protocol.ConversationBrief, error) {
	vf := visibleFrom(m)
	b := protocol.ConversationBrief{
		ConvID: c.ID, Type: c.Type, Name: c.Name, OwnerID: c.OwnerID, MembersCount: c.MembersCount,
		Fanout: protocol.FanoutWrite, MaxSeq: c.MaxSeq, ReadSeq: m.ReadSeq, DeliveredSeq: m.DeliveredSeq,
		ClearedSeq: m.ClearedSeq, Unread: unreadOf(c, m), UpdatedAt: c.UpdatedAt,
		RetentionSeconds: int64(store.ConversationRetention(c, s.retention) / time.Second),
	}
	if c.ReadFanout() {
		b.Fanout = protocol.FanoutRead
		if s.online != nil {
			n, err := s.onlineCount(ctx, tx, c)
			if err != nil {
				return b, fmt.Errorf("online count of %s: %w", c.ID, err)
			}
			b.OnlineCount = &n
		}
	}
	if c.MaxSeq > vf {
		last, err := tx.Message(ctx, c.ID, c.MaxSeq)
		switch {
		case errors.Is(err, store.ErrNotFound): // expired (retention): no last message to show
		case err != nil:
			return b, fmt.Errorf("last message of %s: %w", c.ID, err)
		default:
			w := live.WireMessage(last)
			b.LastMessage = &w
		}
	}
	if c.Type == protocol.TypeDirect {
		if members == nil {
			var err error
			if members, err = tx.Members(ctx, c.ID); err != nil {
				return b, fmt.Errorf("members of %s: %w", c.ID, err)
			}
		}
		var pr, pd int64
		for _, p := range members {
			if p.UserID != m.UserID {
				pr, pd = p.ReadSeq, p.DeliveredSeq
			}
		}
		b.PeerReadSeq, b.PeerDeliveredSeq = &pr, &pd
	}
	return b, nil
}
