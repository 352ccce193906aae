// Package chat is Parley's domain logic, written once above the store: sending with
// idempotency, gapless per-conversation seqs, write fanout of sync events, read and delivered
// positions that never move backwards, receipts, unread counts, recall, delete-for-me,
// groups, snapshots and cursor sync. Every mutation runs inside one store.Update, so a
// message, its seq and every event it produces commit together; committed events are then
// handed to the hub and to internal/live for live delivery.
package chat

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleychat/parley/internal/auth"
	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/hub"
	"github.com/parleychat/parley/internal/live"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tasks"
)

// Config holds the chat rules an operator may tune.
type Config struct {
	RecallWindow    time.Duration // how long a sender may recall a message; default 24h
	EventRetention  time.Duration // how long sync events are kept; default 30 days
	MaxGroupMembers int           // largest group; default 100,000 (past WriteFanoutMax a group is read fanout)
	DefaultTokenTTL time.Duration // default 30 days
	// WriteFanoutMax is the largest group whose messages are events in every member's log;
	// a group that grows past it switches to read fanout for good (docs/design.md, "Large
	// groups"). Default 500.
	WriteFanoutMax int
	// MaxPushDevices is how many devices of one user may be registered for push; a
	// registration past it is ErrConflict. Default 20.
	MaxPushDevices int
	// MaxUploadSize is the largest attachment, in bytes; default 100 MiB.
	MaxUploadSize int64
	// UploadQuota is how many bytes one user may upload in 24 hours; default 1 GiB.
	UploadQuota int64
}

// DefaultConfig returns the defaults of docs/protocol.md.
func DefaultConfig() Config {
	return Config{
		RecallWindow:    24 * time.Hour,
		EventRetention:  30 * 24 * time.Hour,
		MaxGroupMembers: 100_000,
		DefaultTokenTTL: 30 * 24 * time.Hour,
		WriteFanoutMax:  500,
		MaxPushDevices:  20,
		MaxUploadSize:   100 << 20,
		UploadQuota:     1 << 30,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.RecallWindow < 0:
		return fmt.Errorf("recall window must not be negative")
	case c.EventRetention <= 0:
		return fmt.Errorf("event retention must be positive")
	case c.MaxGroupMembers < 2:
		return fmt.Errorf("max group members must be at least 2")
	case c.DefaultTokenTTL <= 0:
		return fmt.Errorf("default token ttl must be positive")
	case c.WriteFanoutMax < 2:
		return fmt.Errorf("write fanout max must be at least 2")
	case c.MaxPushDevices < 1:
		return fmt.Errorf("max push devices must be at least 1")
	case c.MaxUploadSize < 1:
		return fmt.Errorf("max upload size must be at least 1 byte")
	case c.UploadQuota < c.MaxUploadSize:
		return fmt.Errorf("the upload quota must be at least the max upload size")
	}
	return nil
}

// Identity is an authenticated caller: one user on one device.
type Identity struct {
	UserID   string
	DeviceID string
}

// Service implements every chat operation. It is safe for concurrent use.
type Service struct {
	st        store.Store
	retention store.RetentionPolicy // Options.Retention
	hub       *hub.Hub
	signer    *auth.Signer
	dirKey    []byte // key of directID
	cfg       Config
	now       func() time.Time
	log       *slog.Logger
	obs       Observer

	gens      sync.Map            // user id -> int64 token generation, cached after first use
	counts    *live.ReadCounts    // members' positions of groups whose receipts were asked for
	recent    *live.Recent        // the newest messages of active read-fanout conversations
	positions *positionBatch      // read-fanout conversations' position updates waiting for their batch
	receipts  *live.ReceiptPushes // read counts pushed to senders

	room func() error // see Options.Room; never nil

	// bg owns the work the Service does off its callers' time (live pushes, receipts,
	// position batches): its context is every such path's, and Close waits for it.
	bg *tasks.Group

	cluster     *live.Cluster // the other nodes, through Options.Bus; nil on a single node
	gensCleared atomic.Int64  // Unix nanoseconds of the last clearing of gens, on one of several nodes (expireGens)
	pusher      Pusher        // SetPusher's; nil: no offline push (push.go)
	online      *onlineCounts // read-fanout groups' online counts; nil without Options.Online

	writeMu  sync.Mutex // guards writeErr
	writeErr error      // the store write failure Healthy reports, until writes recover
}

// Observer receives measurements; the metrics package implements it. Methods must be cheap
// and safe for concurrent use.
type Observer interface {
	MessageStored(d time.Duration, duplicate bool)
	EventsCommitted(n int)
}

type nopObserver struct{}

func (nopObserver) MessageStored(time.Duration, bool) {}
func (nopObserver) EventsCommitted(int)               {}

// Options are the dependencies of a Service.
type Options struct {
	Store  store.Store
	Hub    *hub.Hub
	Signer *auth.Signer
	// DirectIDKey keys the derivation of direct conv_ids; it must stay the same for the life
	// of the data (server.DirectIDKey keeps it in the data directory). Default: a random key
	// for this Service only, which is fine for tests.
	DirectIDKey []byte
	Config      Config
	Now         func() time.Time // default time.Now
	// AfterFunc runs f once d has passed on Now's clock, on a goroutine of its own; the
	// receipts pushes wait with it. Default: time.AfterFunc. Tests with a fake Now pass a
	// fake of it too.
	AfterFunc func(d time.Duration, f func())
	Logger    *slog.Logger // default slog.Default()
	Observer  Observer     // default: none
	// Room reports whether the store's disk has room for writes again (nil) or why not. A
	// write failure stays reported by Healthy until a write succeeds while Room says yes:
	// one small write can succeed on a disk that is still full. Default: always room.
	Room func() error
	// Bus links this node to the other nodes on the same store (live.Cluster): wake-ups,
	// read-fanout messages, position raises, revocations and device kicks cross it. nil (the
	// default) is a single node, which publishes nothing: nobody would read it. The caller
	// owns the bus and closes it after the Service's last use.
	Bus bus.Bus
	// Retention is the operator's: how long messages are kept (0: for ever), and the bounds
	// of a group's own. The store's reads leave expired messages out already (tier.Wrap);
	// the Service needs it for what it holds in memory (a large group's newest messages),
	// the briefs' retention_seconds, and to check what a group's owner asks (SetRetention).
	Retention store.RetentionPolicy
	// Online counts who is online, for the online_count of read-fanout groups' briefs
	// (presence.Tracker). nil (the default): briefs carry no online_count.
	Online OnlineCounter
}

// New returns a Service. It starts background work only as its calls need it (Close stops
// it); RunRetention is the owner's to run.
func New(o Options) *Service {
	s := &Service{retention: o.Retention, st: o.Store, hub: o.Hub, signer: o.Signer, dirKey: o.DirectIDKey, cfg: o.Config, now: o.Now, log: o.Logger, obs: o.Observer,
		positions: newPositionBatch(),
		bg:        tasks.New()}
	if len(s.dirKey) == 0 {
		s.dirKey = newDirectIDKey()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.hub == nil {
		s.hub = hub.New()
	}
	if o.Online != nil {
		s.online = &onlineCounts{counter: o.Online, groups: make(map[string]onlineCount)}
	}
	s.hub.SetTypingClock(s.now) // typing expires by the service's clock
	s.room = o.Room
	if s.room == nil {
		s.room = func() error { return nil }
	}
	var countsHeld, recentHeld, receiptsHeld func(string, bool) // nil on a single node
	var ttl time.Duration
	if o.Bus != nil {
		s.gensCleared.Store(time.Now().UnixNano())
		peer := elsewhere{s}
		s.cluster = live.NewCluster(live.ClusterOptions{Bus: o.Bus, Hub: s.hub, Node: newID("n_"), Tasks: s.bg,
			Now: s.now, Logger: s.log, Observer: s.obs, Conversations: peer, Changes: peer, Revocations: peer})
		s.hub.SetInterest(s.cluster)
		hold := func(h live.Holder) func(string, bool) {
			return func(convID string, on bool) { s.cluster.HoldConv(convID, h, on) }
		}
		countsHeld, recentHeld, receiptsHeld = hold(live.HoldCounts), hold(live.HoldRecent), hold(live.HoldReceipts)
		ttl = live.CacheTTL
	}
	s.counts, s.recent = live.NewReadCounts(countsHeld, ttl), live.NewRecent(recentHeld, ttl)
	s.receipts = live.NewReceiptPushes(live.ReceiptPushesOptions{Counter: receiptCounter{s}, Hub: s.hub, Cluster: s.cluster,
		Tasks: s.bg, OnHold: receiptsHeld, Now: s.now, AfterFunc: o.AfterFunc, Logger: s.log})
	return s
}

// ErrClosed answers a call that needs the Service's background work after Close.
var ErrClosed = errors.New("chat: service closed")

// Close stops the Service's background work and waits for it, so that its owner may then
// close the store and the bus. Calls after Close may fail with ErrClosed or a cancelled
// context; the owner stops serving first.
func (s *Service) Close() { s.bg.Close() }

// Hub returns the hub the service publishes committed events to.
func (s *Service) Hub() *hub.Hub { return s.hub }

func (s *Service) nowMS() int64 { return s.now().UnixMilli() }

// Now is the service's clock (Options.Now), for the parts beside it that keep time by its
// rules: signed URLs' expiry, the attachment collector.
func (s *Service) Now() time.Time { return s.now() }
