package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/parleychat/parley/protocol"
)

// Presence is one user's presence (docs/protocol.md section 9.11): State is PresenceOnline,
// PresenceAway or PresenceOffline; LastActiveAt (RFC 3339, to the minute) is set only for
// away and offline, and only when the server knows it. A user the caller may not see, or
// who hides their presence, is offline with no LastActiveAt.
type Presence = protocol.Presence

// The presence states.
const (
	PresenceOnline  = protocol.PresenceOnline
	PresenceAway    = protocol.PresenceAway
	PresenceOffline = protocol.PresenceOffline
)

// MaxPresenceSubscriptions is how many users one Client follows the presence of.
const MaxPresenceSubscriptions = protocol.MaxPresenceSubscriptions

// ErrTooManyPresence is returned by SubscribePresence when the users followed would be more
// than MaxPresenceSubscriptions.
var ErrTooManyPresence = errors.New("parley: presence: at most 500 users are followed")

// presenceSubs is what the SDK remembers of the app's presence wishes, to restore them on
// every new connection: presence subscriptions and a device's away belong to a connection.
type presenceSubs struct {
	// turn (capacity 1) is held by whoever sends a presence op, so that a reconnect's
	// restoring and the app's calls reach the server in the order they change users.
	turn chan struct{}

	mu    sync.Mutex      // guards users and away
	users map[string]bool // the users the app subscribed to
	away  bool            // the app said this device is away
}

func (p *presenceSubs) init() {
	p.turn = make(chan struct{}, 1)
	p.users = make(map[string]bool)
}

func (p *presenceSubs) lock(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *presenceSubs) unlock() { <-p.turn }

// SubscribePresence follows the presence of users (op "presence_subscribe"), adding them
// to those followed already, or, with replace, in their place. It returns each user's
// state now, in the order of users; OnPresence receives the same answer, and then every
// change, in the order the server sent them, so an app that keeps its state from OnPresence
// alone never applies an old state over a newer one. The Client remembers the set and
// subscribes to it again after every reconnect (OnPresence then receives that answer too).
//
// At most MaxPresenceSubscriptions users are followed in all, counted here: more returns
// ErrTooManyPresence and changes nothing. Who may be seen is decided at the subscription:
// after a conversation with a user is created, subscribe to them again. Without a
// connection it only records the wish and returns ErrNotConnected.
func (c *Client) SubscribePresence(ctx context.Context, users []string, replace bool) ([]Presence, error) {
	p := &c.presence
	if err := p.lock(ctx); err != nil {
		return nil, err
	}
	defer p.unlock()
	p.mu.Lock()
	next := make(map[string]bool, len(users))
	if !replace {
		maps.Copy(next, p.users)
	}
	for _, u := range users {
		next[u] = true
	}
	p.mu.Unlock()
	if len(next) > MaxPresenceSubscriptions {
		return nil, fmt.Errorf("%w (%d asked)", ErrTooManyPresence, len(next))
	}
	cn := c.conn.Load()
	if cn != nil {
		var out protocol.PresenceList
		req := protocol.PresenceSubscribeRequest{Users: nonNil(users), Replace: replace}
		if err := cn.request(ctx, protocol.OpPresenceSubscribe, req, &out); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.users = next
		p.mu.Unlock()
		return out.Presence, nil
	}
	p.mu.Lock()
	p.users = next
	p.mu.Unlock()
	return nil, ErrNotConnected
}

// UnsubscribePresence stops following users (op "presence_unsubscribe"). Without a
// connection it only forgets them.
func (c *Client) UnsubscribePresence(ctx context.Context, users []string) error {
	p := &c.presence
	if err := p.lock(ctx); err != nil {
		return err
	}
	defer p.unlock()
	p.mu.Lock()
	for _, u := range users {
		delete(p.users, u)
	}
	p.mu.Unlock()
	cn := c.conn.Load()
	if cn == nil {
		return nil
	}
	req := protocol.PresenceSubscribeRequest{Users: nonNil(users)}
	return cn.request(ctx, protocol.OpPresenceUnsubscribe, req, nil)
}

// SetAway says whether this device is away (op "presence_set"), as an app does when its
// window is hidden or the user idles: the user is away once every connected device is.
// The Client says it again after every reconnect. Without a connection it only records it
// and returns ErrNotConnected.
func (c *Client) SetAway(ctx context.Context, away bool) error {
	p := &c.presence
	if err := p.lock(ctx); err != nil {
		return err
	}
	defer p.unlock()
	p.mu.Lock()
	p.away = away
	p.mu.Unlock()
	cn := c.conn.Load()
	if cn == nil {
		return ErrNotConnected
	}
	return sendAway(ctx, cn, away)
}

func sendAway(ctx context.Context, cn *wsConn, away bool) error {
	state := protocol.PresenceActive
	if away {
		state = protocol.PresenceAway
	}
	return cn.request(ctx, protocol.OpPresenceSet, protocol.PresenceSetRequest{State: state}, nil)
}

// restorePresence subscribes a new connection to the users the app follows, and says
// away again if the app had said so.
func (c *Client) restorePresence(ctx context.Context, cn *wsConn) {
	p := &c.presence
	if err := p.lock(ctx); err != nil {
		return
	}
	defer p.unlock()
	p.mu.Lock()
	users, away := slices.Sorted(maps.Keys(p.users)), p.away
	p.mu.Unlock()
	if len(users) > 0 {
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		req := protocol.PresenceSubscribeRequest{Users: users, Replace: true}
		err := cn.request(rctx, protocol.OpPresenceSubscribe, req, nil) // OnPresence gets the answer
		cancel()
		if err != nil {
			c.log.Info("parley: presence subscription not restored", "users", len(users), "err", err)
		}
	}
	if away {
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		if err := sendAway(rctx, cn, true); err != nil {
			c.log.Info("parley: away not restored", "err", err)
		}
		cancel()
	}
}

// presenceFrame hands the entries of a presence push or subscribe answer to OnPresence. It
// runs on the reader, so both come in the order the server sent them.
func (c *Client) presenceFrame(ps []Presence) {
	if c.opts.OnPresence != nil && len(ps) > 0 {
		c.opts.OnPresence(ps)
	}
}

// GetPresence returns the presence of users now (GET /v1/presence; at most
// MaxPresenceSubscriptions, else 400), in their order, without following them.
func (c *Client) GetPresence(ctx context.Context, users []string) ([]Presence, error) {
	var out protocol.PresenceList
	query := url.Values{"users": {strings.Join(users, ",")}}
	_, err := c.http.do(ctx, http.MethodGet, "/v1/presence", query, nil, &out)
	return out.Presence, err
}

// SetPresenceHidden hides the user's presence from everyone, on every device, or shows it
// again (PATCH /v1/me {"presence": "hidden" | "visible"}; stored by the server). A hidden
// user looks offline, with no last_active_at, exactly as a stranger does. It returns what Me
// returns, Presence included.
func (c *Client) SetPresenceHidden(ctx context.Context, hidden bool) (Me, error) {
	v := protocol.PresenceVisible
	if hidden {
		v = protocol.PresenceHidden
	}
	var out Me
	_, err := c.http.do(ctx, http.MethodPatch, "/v1/me", nil, protocol.MeUpdate{Presence: &v}, &out)
	return out, err
}
