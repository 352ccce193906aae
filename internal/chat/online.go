package chat

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/parleychat/parley/internal/store"
)

// OnlineCounter counts which users are online; presence.Tracker implements it. It must be
// safe for concurrent use and must not block on I/O.
type OnlineCounter interface {
	// CountOnline returns how many of users are online or away, on any node.
	CountOnline(users []string) int
}

// OnlineRefresh is the longest a read-fanout group's online_count is kept before it is
// counted again: a group's count is computed at most once per OnlineRefresh per node,
// whatever the number of briefs asked for.
const OnlineRefresh = 10 * time.Second

// onlineSample is the most members one count reads: a larger group is estimated from a
// window of that many members starting at a random ordinal, scaled to its members_count.
const onlineSample = 2000

// onlineCacheMax bounds the groups whose counts are kept; past it, the stale ones go.
const onlineCacheMax = 10000

// onlineCounts keeps the online count of read-fanout groups for OnlineRefresh.
type onlineCounts struct {
	counter OnlineCounter
	mu      sync.Mutex // guards groups
	groups  map[string]onlineCount
}

type onlineCount struct {
	n  int
	at time.Time // when n was counted, or claimed for a recount
}

// onlineCount returns c's approximate online count: the cached one while it is fresh;
// otherwise it counts again, from tx. While one caller recounts, the others are answered
// the previous count.
func (s *Service) onlineCount(ctx context.Context, tx store.ReadTx, c store.Conversation) (int, error) {
	o := s.online
	now := s.now()
	o.mu.Lock()
	e, ok := o.groups[c.ID]
	if ok && now.Sub(e.at) < OnlineRefresh {
		o.mu.Unlock()
		return e.n, nil
	}
	if ok {
		o.groups[c.ID] = onlineCount{n: e.n, at: now} // claimed: the others keep e.n meanwhile
	}
	o.mu.Unlock()
	n, err := countOnline(ctx, tx, c, o.counter)
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.groups) >= onlineCacheMax {
		for id, g := range o.groups {
			if now.Sub(g.at) >= OnlineRefresh {
				delete(o.groups, id)
			}
		}
	}
	o.groups[c.ID] = onlineCount{n: n, at: now}
	return n, nil
}

// countOnline counts c's members online: all of them in a group of up to onlineSample
// members, else a window of onlineSample at a random place, scaled to members_count.
func countOnline(ctx context.Context, tx store.ReadTx, c store.Conversation, counter OnlineCounter) (int, error) {
	var members []store.Member
	var err error
	if c.MembersCount <= onlineSample {
		members, err = tx.Members(ctx, c.ID)
	} else {
		var last int64
		if last, err = tx.LastOrdinal(ctx, c.ID); err != nil {
			return 0, err
		}
		after := rand.Int64N(max(1, last-onlineSample)) // ordinals have gaps: the window may be short
		members, err = tx.MembersAfter(ctx, c.ID, after, onlineSample)
	}
	if err != nil || len(members) == 0 {
		return 0, err
	}
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.UserID
	}
	n := counter.CountOnline(ids)
	if len(members) < c.MembersCount {
		n = int(int64(n) * int64(c.MembersCount) / int64(len(members)))
	}
	return n, nil
}
