package chat

import (
	"context"
	"fmt"

	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Followed is one of a user's read-fanout conversations as a WebSocket connection follows
// it (hub.Follow): what the user has seen of it (max(read_seq, visible_from)) and its
// newest seq.
type Followed struct {
	ConvID string
	Seen   int64
	MaxSeq int64
}

// ReadFanoutState is what a WebSocket connection needs of its user's read-fanout
// conversations when it opens: every one of them, to follow, and, for a connection made
// with a mark, the briefs of those changed since that mark with the mark to give next
// time (its "changes" push).
type ReadFanoutState struct {
	Follow  []Followed
	Mark    int64
	Changed []protocol.ConversationBrief
}

// ReadFanoutState reads the user's read-fanout conversations in one snapshot; mark < 0
// asks for no briefs. A mark ahead of the store's latest is ErrConflict, as for Sync.
func (s *Service) ReadFanoutState(ctx context.Context, me Identity, mark int64) (ReadFanoutState, error) {
	var st ReadFanoutState
	err := s.view(ctx, "read fanout state", func(tx store.ReadTx) error {
		all, latest, err := tx.ReadFanoutChanges(ctx, me.UserID, -1)
		if err != nil {
			return err
		}
		if mark > latest {
			return conflictMark(mark, latest)
		}
		st.Mark = latest
		for _, m := range all {
			st.Follow = append(st.Follow, Followed{ConvID: m.ConvID, Seen: max(m.ReadSeq, visibleFrom(m.Member)), MaxSeq: m.Conversation.MaxSeq})
			if mark < 0 || m.Conversation.Mark <= mark {
				continue
			}
			b, err := s.brief(ctx, tx, m.Conversation, m.Member, nil)
			if err != nil {
				return err
			}
			st.Changed = append(st.Changed, b)
		}
		return nil
	})
	if st.Changed == nil {
		st.Changed = []protocol.ConversationBrief{}
	}
	return st, err
}

// publishLive hands a committed message of a read-fanout conversation to the hub: pushed in
// full, encoded once, to the connections that have the conversation open here, noticed to
// the other members online, and a wake-up to the long-polls of its members. The users in
// inLog (the mentioned members) got the message as an event of their log, published
// before: their connections get that, not the push as well.
func (s *Service) publishLive(m *store.Message, payload []byte, inLog []string) {
	s.hub.Message(m.ConvID, m.Seq, m.SenderID, &hub.Body{Type: protocol.OpMessage, ConvID: m.ConvID, TS: m.CreatedAt, Data: live.MessageFrame(payload), Skip: inLog})
	s.hub.NotifyConversation(m.ConvID)
	if s.cluster != nil {
		s.cluster.Message(m.ConvID, m.Seq, m.SenderID, m.CreatedAt, payload, inLog)
		s.cluster.CheckRoom(m.ConvID)
	}
}

// conflictMark is the error for a mark ahead of the store's latest.
func conflictMark(mark, latest int64) error {
	return fmt.Errorf("%w: mark %d is ahead of the latest mark %d", ErrConflict, mark, latest)
}
