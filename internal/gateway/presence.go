package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/presence"
	"github.com/parleychat/parley/protocol"
)

// wirePresence converts a tracker entry to its wire form.
func wirePresence(e presence.Entry) protocol.Presence {
	p := protocol.Presence{UserID: e.UserID, State: e.State.String()}
	if e.LastActive > 0 && e.State != presence.Online {
		p.LastActiveAt = time.Unix(e.LastActive, 0).UTC().Format(time.RFC3339)
	}
	return p
}

// visiblePresence answers the presence of users as the caller may see it: anyone the
// caller may not see, or who hides it, is offline with no last_active_at. It also returns
// the users the caller may see (hidden or not), which a subscription follows.
func (g *Gateway) visiblePresence(ctx context.Context, me chat.Identity, users []string) ([]protocol.Presence, []string, error) {
	vis, err := g.svc.PresenceVisible(ctx, me, users)
	if err != nil {
		return nil, nil, err
	}
	out := make([]protocol.Presence, len(users))
	var follow []string
	for i, id := range users {
		out[i] = protocol.Presence{UserID: id, State: protocol.PresenceOffline}
		hidden, ok := vis[id]
		if !ok {
			continue
		}
		follow = append(follow, id)
		g.tracker.SetHidden(id, hidden)
		if !hidden {
			out[i] = wirePresence(g.tracker.Entry(id))
		}
	}
	return out, follow, nil
}

// getPresence serves GET /v1/presence?users=a,b,...
func (g *Gateway) getPresence(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	if g.tracker == nil {
		return 0, nil, fmt.Errorf("%w: presence is off", chat.ErrNotFound)
	}
	q := r.URL.Query().Get("users")
	if q == "" {
		return 0, nil, fmt.Errorf("%w: users is required", chat.ErrInvalid)
	}
	users := strings.Split(q, ",")
	if len(users) > protocol.MaxPresenceSubscriptions {
		return 0, nil, invalidf("users: at most %d", protocol.MaxPresenceSubscriptions)
	}
	for _, u := range users {
		if !protocol.ValidUserID(u) {
			return 0, nil, invalidf("users: a user_id is malformed")
		}
	}
	out, _, err := g.visiblePresence(r.Context(), me, users)
	return http.StatusOK, protocol.PresenceList{Presence: out}, err
}

// patchMe serves PATCH /v1/me: {"presence": "hidden"} or {"presence": "visible"}.
func (g *Gateway) patchMe(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	var req protocol.MeUpdate
	if err := bodyOf(body).decode(&req); err != nil {
		return 0, nil, err
	}
	if req.Presence != nil {
		hidden := *req.Presence == protocol.PresenceHidden
		if !hidden && *req.Presence != protocol.PresenceVisible {
			return 0, nil, invalidf("presence must be %q or %q", protocol.PresenceHidden, protocol.PresenceVisible)
		}
		if err := g.svc.SetPresenceHidden(r.Context(), me, hidden); err != nil {
			return 0, nil, err
		}
		if g.tracker != nil {
			g.tracker.SetHidden(me.UserID, hidden)
			g.tracker.PublishHidden(me.UserID, hidden)
		}
	}
	out, err := g.svc.Me(r.Context(), me)
	return http.StatusOK, out, err
}

// presenceOp serves "presence_subscribe", "presence_unsubscribe" and "presence_set".
func (c *wsConn) presenceOp(ctx context.Context, op string, params any) (any, error) {
	t := c.g.tracker
	if t == nil {
		return nil, fmt.Errorf("%w: presence is off", chat.ErrNotFound)
	}
	switch p := params.(type) {
	case protocol.PresenceSetRequest:
		t.SetAway(c.me.UserID, c.me.DeviceID, p.State == protocol.PresenceAway)
		return empty{}, nil
	case protocol.PresenceSubscribeRequest:
		w := c.watch.Load()
		if op == protocol.OpPresenceUnsubscribe {
			if w != nil {
				w.Unwatch(p.Users)
			}
			return empty{}, nil
		}
		if w == nil {
			w = t.NewWatcher(c.wake)
			c.watch.Store(w)
		}
		out, follow, err := c.g.visiblePresence(ctx, c.me, p.Users)
		if err != nil {
			return nil, err
		}
		es, err := w.Watch(follow, p.Replace)
		if err != nil {
			if errors.Is(err, presence.ErrTooMany) {
				err = fmt.Errorf("%w: %v", chat.ErrConflict, err)
			}
			return nil, err
		}
		// The answer is what the watcher was handed, so that the changes pushed after it
		// follow from it (a change held back by coalescing is pushed, not answered).
		shown := make(map[string]protocol.Presence, len(es))
		for _, e := range es {
			shown[e.UserID] = wirePresence(e)
		}
		for i := range out {
			if e, ok := shown[out[i].UserID]; ok {
				out[i] = e
			}
		}
		return protocol.PresenceList{Presence: out}, nil
	}
	return nil, fmt.Errorf("gateway: presence params %T", params)
}

// writePresence pushes the presence changes waiting for the connection, in one frame, and
// at most one frame a tick: the tracker hands changes out once a tick, but a frame written
// late in one turn (behind others' frames, or a busy writer) and early in the next would
// come less than a tick apart, so a frame due sooner waits, its changes with the watcher.
func (c *wsConn) writePresence() (wrote bool, err error) {
	w := c.watch.Load()
	if w == nil {
		return false, nil
	}
	if wait := c.g.tracker.Config().Tick - time.Since(c.presAt); wait > 0 {
		if w.Waiting() && c.presLater.CompareAndSwap(false, true) {
			time.AfterFunc(wait, func() { // a wake after the connection's end does nothing
				c.presLater.Store(false)
				c.wake()
			})
		}
		return false, nil
	}
	es := w.Take()
	if es == nil {
		return false, nil
	}
	push := protocol.PresencePush{Op: protocol.OpPresence, Presence: make([]protocol.Presence, len(es))}
	for i, e := range es {
		push.Presence[i] = wirePresence(e)
	}
	b, err := json.Marshal(push)
	if err != nil {
		return false, err
	}
	c.g.met.PresenceFrameSent()
	c.presAt = time.Now()
	return true, c.write(b)
}
