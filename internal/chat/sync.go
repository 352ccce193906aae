package chat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// readPositionsLimit is the largest group whose members' read positions a snapshot lists.
const readPositionsLimit = 100

// Snapshot returns one page of the state a new device starts from, read in one consistent
// snapshot. The first page (q.After == "") reads the user's latest committed cursor at that
// cut; every later page carries the same cursor (it travels in the token), so that syncing
// from it after assembling the pages replays everything that changed meanwhile (section 8.2).
// recent < 0 means the default number of messages per conversation.
func (s *Service) Snapshot(ctx context.Context, me Identity, recent int, q PageQuery) (protocol.SyncSnapshot, error) {
	if recent < 0 {
		recent = protocol.DefaultRecent
	}
	recent = min(recent, protocol.MaxRecent)
	snap := protocol.SyncSnapshot{
		Conversations: []protocol.ConversationBrief{},
		Messages:      map[string][]protocol.Message{},
		ReadPositions: map[string]map[string]int64{},
	}
	k, limit, err := parsePage(q, tokenSnapshot)
	if err != nil {
		return snap, err
	}
	err = s.view(ctx, "snapshot", func(tx store.ReadTx) error {
		if q.After == "" {
			b, err := tx.Cursors(ctx, me.UserID)
			if err != nil {
				return err
			}
			// The mark at the same cut: read-fanout conversations changed after it come by
			// the first sync from it (section 10).
			_, mark, err := tx.ReadFanoutChanges(ctx, me.UserID, math.MaxInt64)
			if err != nil {
				return err
			}
			k.cursor, k.mark = b.Last, mark
		}
		snap.Cursor, snap.Mark = k.cursor, k.mark
		rest, err := visibleMemberships(ctx, tx, me.UserID, k)
		if err != nil {
			return err
		}
		snap.Next, err = fillPage(rest, k, limit, func(m store.Membership) (int, error) {
			return s.snapshotConversation(ctx, tx, &snap, m, recent)
		})
		snap.HasMore = snap.Next != ""
		return err
	})
	return snap, err
}

// snapshotConversation adds one conversation, its recent messages and, where the
// conversation shows readers and is small enough, its members' read positions to snap, and
// returns about how many bytes it added.
func (s *Service) snapshotConversation(ctx context.Context, tx store.ReadTx, snap *protocol.SyncSnapshot, m store.Membership, recent int) (int, error) {
	c := m.Conversation
	var members []store.Member
	if showsReaders(c) && c.MembersCount <= readPositionsLimit {
		var err error
		if members, err = tx.Members(ctx, c.ID); err != nil {
			return 0, err
		}
		pos := make(map[string]int64, len(members))
		for _, mem := range members {
			pos[mem.UserID] = mem.ReadSeq
		}
		snap.ReadPositions[c.ID] = pos
	}
	b, err := s.brief(ctx, tx, c, m.Member, members)
	if err != nil {
		return 0, err
	}
	snap.Conversations = append(snap.Conversations, b)
	size := briefOverhead + messageBytes(b.LastMessage) + len(members)*protocol.MaxIDLen
	msgs := []protocol.Message{}
	if recent > 0 && c.MaxSeq > visibleFrom(m.Member) {
		// Only the hot ones: a conversation quiet for longer than the hot window shows its
		// newest message, and the client reads further back as history.
		r := store.MessageRange{Floor: visibleFrom(m.Member), BeforeSeq: c.MaxSeq + 1, Limit: recent}
		ms, err := store.HotOnly(tx).Messages(ctx, c.ID, r)
		if err != nil {
			return 0, err
		}
		msgs = wireMessages(ms)
	}
	for i := range msgs {
		size += messageBytes(&msgs[i])
	}
	snap.Messages[c.ID] = msgs
	return size, nil
}

// Sync returns up to limit events after cursor (0 means the default). When there are none
// and wait > 0 it waits up to min(wait, 30 s) for one to commit: it is woken by the commit
// itself through the hub. If ctx ends while it waits, it returns the empty response and no
// error (the server is draining or the client left). ErrGone when cursor is older than the
// retained log, ErrConflict when it is ahead of the latest cursor.
//
// mark is the position among read-fanout changes the previous sync returned (0 the first
// time): the response lists the user's read-fanout conversations with a message since, and
// the new mark. A long-poll also returns as soon as one of them changes.
func (s *Service) Sync(ctx context.Context, me Identity, cursor, mark int64, limit int, wait time.Duration) (protocol.SyncResponse, error) {
	switch {
	case cursor < 0 || mark < 0 || limit < 0 || wait < 0:
		return protocol.SyncResponse{}, invalid("cursor, mark, limit and wait must not be negative")
	case limit == 0:
		limit = protocol.DefaultSyncLimit
	}
	limit = min(limit, protocol.MaxSyncLimit)
	wait = min(wait, protocol.MaxLongPollSecond*time.Second)
	if wait == 0 {
		return s.events(ctx, me.UserID, cursor, mark, limit, nil)
	}
	// Subscribe before reading, so that a commit between the read and the wait still wakes us.
	sub := s.hub.Subscribe(me.UserID, 4)
	defer sub.Close()
	s.AwaitSubscriptions() // and other nodes' commits wake us too
	var watched []string   // the user's read-fanout conversations, found by the first read
	resp, err := s.events(ctx, me.UserID, cursor, mark, limit, &watched)
	watch := s.hub.WatchConversations(watched)
	defer watch.Close()
	if len(watched) > 0 {
		s.AwaitSubscriptions()
	}
	if err == nil && len(resp.Events) == 0 && len(resp.Conversations) == 0 && len(watched) > 0 {
		// Read again now that the watch is on: a message between the first read and the
		// watch woke nobody.
		resp, err = s.events(ctx, me.UserID, cursor, mark, limit, nil)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if err != nil && ctx.Err() != nil {
			return protocol.SyncResponse{Cursor: cursor, Mark: mark, Events: []protocol.SyncEvent{}}, nil
		}
		if err != nil || len(resp.Events) > 0 || len(resp.Conversations) > 0 {
			return resp, err
		}
		select {
		case ev := <-sub.Events():
			if ev.Cursor == 0 {
				continue // ephemeral (a receipts push): not in the log, not a long-poll's
			}
		case <-watch.C():
		case <-sub.Done(): // overflowed (so events exist) or kicked: answer with what is there
			return s.events(ctx, me.UserID, cursor, mark, limit, nil)
		case <-timer.C:
			return resp, nil
		case <-ctx.Done():
			return resp, nil
		}
		resp, err = s.events(ctx, me.UserID, cursor, mark, limit, nil)
	}
}

// events reads one page of the user's log after cursor, and the user's read-fanout
// conversations changed since mark; watched, if not nil, is set to every read-fanout
// conversation of the user, changed or not (for a long-poll to watch: a conversation the
// user joins while it waits comes with an event in their log).
func (s *Service) events(ctx context.Context, userID string, cursor, mark int64, limit int, watched *[]string) (protocol.SyncResponse, error) {
	resp := protocol.SyncResponse{Cursor: cursor, Mark: mark, Events: []protocol.SyncEvent{}}
	err := s.view(ctx, "sync", func(tx store.ReadTx) error {
		if mark >= 0 {
			if err := s.readFanoutChanges(ctx, tx, userID, &resp, watched); err != nil {
				return err
			}
		}
		b, err := tx.Cursors(ctx, userID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return notFound("user %s", userID)
		case err != nil:
			return err
		case cursor > b.Last:
			return fmt.Errorf("%w: cursor %d is ahead of the latest cursor %d", ErrConflict, cursor, b.Last)
		case cursor < b.Pruned:
			return fmt.Errorf("%w: cursor %d is older than the retained log (events up to %d were removed): take a new snapshot", ErrGone, cursor, b.Pruned)
		}
		evs, err := tx.Events(ctx, userID, cursor, limit+1)
		if err != nil {
			return err
		}
		if resp.HasMore = len(evs) > limit; resp.HasMore {
			evs = evs[:limit]
		}
		resp.Events = wireEvents(evs)
		if len(evs) > 0 {
			resp.Cursor = evs[len(evs)-1].Cursor
		}
		return nil
	})
	return resp, err
}

// Events returns up to limit events of the user's log after cursor, as Sync does without
// waiting, and without the read-fanout conversations (Mark is 0): the WebSocket's catch-up
// pages.
func (s *Service) Events(ctx context.Context, me Identity, cursor int64, limit int) (protocol.SyncResponse, error) {
	if cursor < 0 || limit <= 0 {
		return protocol.SyncResponse{}, invalid("cursor must not be negative, limit must be positive")
	}
	resp, err := s.events(ctx, me.UserID, cursor, -1, min(limit, protocol.MaxSyncLimit), nil)
	resp.Mark = 0
	return resp, err
}

// readFanoutChanges fills resp's mark and conversations from the store's (store.MarkReader),
// reading from resp.Mark; with watched, it lists every read-fanout conversation of the user
// there too.
func (s *Service) readFanoutChanges(ctx context.Context, tx store.ReadTx, userID string, resp *protocol.SyncResponse, watched *[]string) error {
	from := resp.Mark
	if watched != nil {
		from = -1 // all of them, to watch; the briefs are of those changed since resp.Mark
	}
	changed, mark, err := tx.ReadFanoutChanges(ctx, userID, from)
	if err != nil {
		return err
	}
	for _, m := range changed {
		if watched != nil {
			*watched = append(*watched, m.ConvID)
		}
		if m.Conversation.Mark <= resp.Mark {
			continue
		}
		b, err := s.brief(ctx, tx, m.Conversation, m.Member, nil)
		if err != nil {
			return err
		}
		resp.Conversations = append(resp.Conversations, b)
	}
	if resp.Mark > mark {
		return conflictMark(resp.Mark, mark)
	}
	resp.Mark = mark
	return nil
}

// LatestCursor returns the user's highest committed cursor.
func (s *Service) LatestCursor(ctx context.Context, userID string) (int64, error) {
	var last int64
	err := s.view(ctx, "latest cursor", func(tx store.ReadTx) error {
		b, err := tx.Cursors(ctx, userID)
		if errors.Is(err, store.ErrNotFound) {
			return notFound("user %s", userID)
		}
		last = b.Last
		return err
	})
	return last, err
}

// RunRetention removes sync events older than the retention period, now and then every
// interval, until ctx ends. Devices whose cursor falls behind the removed events get 410 and
// take a new snapshot.
func (s *Service) RunRetention(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.PruneOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("event retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PruneOnce removes every event older than the retention period, in bounded passes of the
// store (store.Store.PruneEvents, which a backend may run beside its writer).
func (s *Service) PruneOnce(ctx context.Context) error {
	const batch = 5000
	before := s.now().Add(-s.cfg.EventRetention).UnixMilli()
	for {
		n, err := s.st.PruneEvents(ctx, before, batch)
		if err := s.wrote(ctx, "prune events", err); err != nil || n < batch {
			return err
		}
	}
}
