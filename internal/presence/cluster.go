package presence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/protocol"
)

// Subject is the one bus subject of presence, which every node publishes on and follows.
const Subject = "parley.presence"

// The kinds of presence messages.
const (
	kindStates = "s" // the states of users on the sending node changed
	kindBeat   = "b" // a heartbeat: the states of (a page of) every user connected there
	kindHidden = "h" // users hid or showed their presence
)

// beatPage is how many users one heartbeat message carries, so that a message stays well
// under the bus's limit (about 40 bytes a user).
const beatPage = 1000

// wireMsg is a presence message between nodes, in JSON.
type wireMsg struct {
	Node  string      `json:"n"`
	Kind  string      `json:"k"`
	Users []wireEntry `json:"us"`
}

// wireEntry is one user's state on the sending node, or for kindHidden, whether hidden.
type wireEntry struct {
	ID     string `json:"u"`
	State  State  `json:"s,omitempty"`
	Last   int64  `json:"l,omitempty"`
	Hidden bool   `json:"h,omitempty"`
}

// NewNodeID returns a random id for this node's life: a restarted node is a new one, and
// what the old one told expires.
func NewNodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "p_" + hex.EncodeToString(b[:])
}

// Attach links t to the other nodes on b, as node (an id unique to this node's life): it
// publishes this node's changes and heartbeats and believes the others' for Timeout after
// each. Call it before the first connection is counted.
func (t *Tracker) Attach(b bus.Bus, node string, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	t.mu.Lock()
	t.node = node
	t.pub = func(msg []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.Publish(ctx, Subject, msg); err != nil {
			log.Debug("presence: publish", "err", err)
		}
	}
	t.mu.Unlock()
	_, err := b.Subscribe(Subject, t.receive)
	return err
}

// publishChangeLocked queues this node's state of the user for the bus if it changed
// since last told. Lock should be held.
func (t *Tracker) publishChangeLocked(id string, u *user) {
	if t.pub == nil {
		return
	}
	if s := u.localLocked(); s != u.told {
		u.told = s
		t.outbox = append(t.outbox, wireEntry{ID: id, State: s, Last: u.last})
	}
}

// flush publishes what publishChangeLocked queued. Called without the lock.
func (t *Tracker) flush(out []wireEntry) {
	for len(out) > 0 {
		n := min(len(out), beatPage)
		t.send(kindStates, out[:n])
		out = out[n:]
	}
}

func (t *Tracker) send(kind string, users []wireEntry) {
	msg, err := json.Marshal(wireMsg{Node: t.node, Kind: kind, Users: users})
	if err == nil {
		t.pub(msg)
	}
}

// heartbeat publishes the state of every user connected here (or in grace), in pages.
func (t *Tracker) heartbeat(now time.Time) {
	t.mu.Lock()
	var page []wireEntry
	for id, u := range t.users {
		if s := u.localLocked(); s != Offline {
			u.told = s
			page = append(page, wireEntry{ID: id, State: s})
		}
	}
	t.mu.Unlock()
	for len(page) > 0 {
		n := min(len(page), beatPage)
		t.send(kindBeat, page[:n])
		page = page[n:]
	}
}

// PublishHidden tells the other nodes that userID hid or showed their presence.
func (t *Tracker) PublishHidden(userID string, hidden bool) {
	if t.pub != nil {
		t.send(kindHidden, []wireEntry{{ID: userID, Hidden: hidden}})
	}
}

// receive acts on a message of another node; anything malformed is dropped whole.
func (t *Tracker) receive(data []byte) {
	var m wireMsg
	if json.Unmarshal(data, &m) != nil || m.Node == "" || m.Node == t.node || len(m.Users) > beatPage {
		return
	}
	for _, e := range m.Users {
		if !protocol.ValidUserID(e.ID) || e.State > Online {
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, e := range m.Users {
		switch m.Kind {
		case kindHidden:
			if u := t.users[e.ID]; u != nil && u.hidden != e.Hidden {
				u.hidden = e.Hidden
				t.changedLocked(u)
			}
		case kindStates, kindBeat:
			t.remoteLocked(e, m.Node, now)
		}
	}
}

// remoteLocked records what node told of a user. Lock should be held.
func (t *Tracker) remoteLocked(e wireEntry, node string, now time.Time) {
	u := t.users[e.ID]
	if u == nil {
		if e.State == Offline && e.Last == 0 {
			return
		}
		u = t.userLocked(e.ID)
	}
	u.last = max(u.last, e.Last/60*60)
	if _, had := u.remote[node]; had && e.State == Offline {
		delete(u.remote, node)
		t.remotes--
	} else if e.State != Offline {
		if u.remote == nil {
			u.remote = make(map[string]remote, 1)
		}
		if !had {
			t.remotes++
		}
		u.remote[node] = remote{state: e.State, expires: now.Add(t.cfg.Timeout)}
	}
	t.changedLocked(u)
}
