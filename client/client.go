package client

import (
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/protocol"
)

// The wire types, re-exported so that users of this public package (who cannot import
// internal/protocol) share the server's one definition of each.
type (
	Message           = protocol.Message
	MessageAck        = protocol.MessageAck
	ConversationBrief = protocol.ConversationBrief
	SyncEvent         = protocol.SyncEvent
	SyncSnapshot      = protocol.SyncSnapshot
	SyncResponse      = protocol.SyncResponse
	Receipts          = protocol.Receipts
	MessagesPage      = protocol.MessagesPage
	User              = protocol.User
	Token             = protocol.Token
	ReadData          = protocol.ReadData
	DeliveredData     = protocol.DeliveredData
	RecallData        = protocol.RecallData
	ConvDeletedData   = protocol.ConvDeletedData
	TextContent       = protocol.TextContent
	Attachment        = protocol.Attachment
	AttachmentContent = protocol.AttachmentContent
	AttachmentURLs    = protocol.AttachmentURLs
)

// Sync event types (SyncEvent.Type).
const (
	EventMessage     = protocol.EventMessage
	EventRead        = protocol.EventRead
	EventDelivered   = protocol.EventDelivered
	EventRecall      = protocol.EventRecall
	EventConvDeleted = protocol.EventConvDeleted
	EventConvUpdated = protocol.EventConvUpdated
)

// Content types of section 6.1 (defined once, in package protocol); values from
// ContentCustom up are the application's to define.
const (
	ContentText   = protocol.ContentText
	ContentImage  = protocol.ContentImage
	ContentFile   = protocol.ContentFile
	ContentAudio  = protocol.ContentAudio
	ContentVideo  = protocol.ContentVideo
	ContentCustom = protocol.ContentCustom
)

// ErrEventType is returned (wrapped) by SyncEvent's typed accessors (Message, Read, ...) for
// an event of another type.
var ErrEventType = protocol.ErrEventType

// Backoff spaces out reconnects and send retries: attempt n waits a uniformly random time in
// [0, min(Max, Base*2^n)] ("full jitter"), so that thousands of clients dropped by the same
// server restart do not all come back in the same instant.
type Backoff struct {
	Base time.Duration // first ceiling; default 200ms
	Max  time.Duration // largest ceiling; default 30s
}

// Delay returns the wait before retry number attempt (0-based).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	ceiling := b.Base
	for i := 0; i < attempt && ceiling < b.Max; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, b.Max)
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = 200 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	b.Max = max(b.Max, b.Base)
	return b
}

// Options configure a Client. Only BaseURL and Token are required.
type Options struct {
	// BaseURL is the server's HTTP root, such as "http://127.0.0.1:8080". The WebSocket URL
	// is derived from it (http -> ws, https -> wss).
	BaseURL string
	// Token is the device token minted by the operator (Admin.IssueToken).
	Token string
	// UserID is the token's user. It is only used to skip one's own messages when
	// AutoDelivered is on; left empty, delivered is sent for those too, which the server
	// treats as a no-op (sending already advanced the sender's positions).
	UserID string

	// HTTPClient carries the HTTP calls; its *http.Transport, if any, also lends the
	// WebSocket dialer its proxy, TLS and dial settings. Default: a new http.Client.
	HTTPClient *http.Client
	// Logger receives reconnects and dropped best-effort work. Default: discard.
	Logger *slog.Logger

	// OnEvent receives every sync event exactly once, in cursor order, never concurrently.
	// It runs while the session holds its delivery lock: it must not call Close, and a slow
	// OnEvent delays later events (never sends).
	//
	// Messages of read-fanout conversations (large groups, section 10) are in no event log;
	// the session fetches or receives them and hands each to OnEvent as a message event
	// with Cursor 0, once, in increasing seq order per conversation, so that an app
	// switching on ev.Type handles both modes alike.
	OnEvent func(SyncEvent)
	// OnConversation, if set, receives the state of a read-fanout conversation whenever it
	// changes: a brief from a sync answer or a changes frame, or a notice or this user's own
	// read moving max_seq, unread or members_count. Unread is the server's count, and
	// after this device's own reads max_seq - max(read_seq, visible_from) as the server
	// computes it, so it agrees across devices. It runs like OnEvent, never concurrently
	// with it.
	OnConversation func(ConversationBrief)
	// OnReceipts, if set, receives the read counts the server pushes for the user's own
	// messages in groups (section 9.5, "receipts"): the newest ones whose counts changed. It
	// runs like OnEvent.
	OnReceipts func(convID string, receipts []Receipts)
	// OnTyping, if set, receives every typing push (section 9.10): in a write-fanout
	// conversation one member's change, in a read-fanout one (for the conversations open
	// here) the set of typers, at most once a second. It runs on the connection's reader,
	// possibly concurrently with OnEvent, and must return quickly. A "started" holds for
	// ExpiresInMS unless a newer push of the same conversation replaces it: the app hides it
	// after that by itself.
	OnTyping func(TypingPush)
	// OnPresence, if set, receives the presence of the users SubscribePresence follows
	// (section 9.11): each subscribe answer (the app's, and the SDK's own after a
	// reconnect), then every change the server pushes, in the order the server sent them; a
	// later entry of a user replaces an earlier one. It runs on the connection's reader,
	// possibly concurrently with OnEvent, and must return quickly.
	OnPresence func([]Presence)
	// OnReset receives a snapshot whenever the session (re)starts from one: on the first Run
	// when Cursor is 0, and when the server answers 410 (cursor expired) or 409 (cursor ahead
	// of the server). State built from earlier events should be replaced by it; events that
	// follow continue from snapshot.Cursor.
	OnReset func(SyncSnapshot)
	// Inbox, if set, merges every event and snapshot before OnEvent/OnReset see them.
	Inbox *Inbox

	// Cursor is the resume point: the last cursor the app has processed (see Client.Cursor).
	// 0 starts fresh from a snapshot, as a new device does.
	Cursor int64
	// Mark and Seqs resume read-fanout conversations as Cursor resumes the event log: the
	// values of Client.Mark and Client.Seqs, persisted with the cursor.
	Mark int64
	Seqs map[string]int64
	// PullDelayMax bounds the random wait before the session fetches the history of a
	// read-fanout conversation that a sync answer or a reconnect's changes frame reported
	// (notices carry their own delay). It spreads the pulls of many clients coming back at
	// once, as the server's --pull-delay-max does for notices. Default 3s; negative: none.
	PullDelayMax time.Duration
	// SnapshotRecent is the recent= of the snapshots the session takes: how many latest
	// messages per conversation it carries. 0 (the default) fetches none, the cheap way to
	// learn the cursor; apps then load history with History.
	SnapshotRecent int
	// AutoDelivered reports "delivered" for messages from other users as they arrive,
	// coalesced to one report per conversation carrying the highest seq. Best effort.
	AutoDelivered bool

	// OnRetry, if set, is called each time a send attempt failed and the SDK is about to
	// send it again after wait: err is that attempt's error (an *Error with Code 429 when
	// the server limited the rate; see ErrorCode). Retries are otherwise silent, so a load
	// tool or a dashboard counts them here. It runs on the sending goroutine and must be
	// quick.
	OnRetry func(err error, wait time.Duration)

	// Backoff spaces out reconnects and send retries.
	Backoff Backoff
	// RequestTimeout bounds one attempt of an internal request (a send attempt, a gap fill,
	// a snapshot, a WebSocket handshake). Default 30s.
	RequestTimeout time.Duration
	// IdleTimeout drops a WebSocket on which nothing was received for this long (the server
	// pings every 30s by default); the client also pings the server every IdleTimeout/2.
	// Default 75s.
	IdleTimeout time.Duration
}

// Client talks to one Parley server as one device. All methods are safe for concurrent use.
type Client struct {
	opts   Options
	http   transport
	log    *slog.Logger
	dialer *websocket.Dialer
	wsURL  string // ws(s)://host/.../v1/ws, without query

	frameSeq atomic.Uint64 // ids of WebSocket request frames

	conn atomic.Pointer[wsConn] // the open WebSocket; nil while disconnected

	deliverMu  sync.Mutex   // serialises deliveries (OnEvent, OnReset, Inbox) and guards haveCursor
	cursor     atomic.Int64 // last cursor delivered; written only with deliverMu held
	haveCursor bool         // cursor is a real resume point (given, or from a snapshot)

	events   *pushQueue  // pushes from the reader to the dispatcher
	overflow atomic.Bool // the reader dropped a push because events was full

	delivered deliveredQueue

	rooms *readConvs // read-fanout conversations and the sync mark

	typing typists // this device's typing, throttled (typing.go)

	presence presenceSubs // the users followed and this device's away (presence.go)

	running atomic.Bool // a Run is active; there is one session per Client

	bgMu sync.Mutex  // guards bg
	bg   *background // the session started by Connect, if any
}

// New returns a Client for opts. It does no I/O: the first request or Run contacts the server.
func New(opts Options) *Client {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 75 * time.Second
	}
	if opts.PullDelayMax == 0 {
		opts.PullDelayMax = 3 * time.Second
	}
	opts.Backoff = opts.Backoff.withDefaults()
	base := strings.TrimRight(opts.BaseURL, "/")
	c := &Client{
		opts:       opts,
		http:       transport{base: base, secret: opts.Token, hc: opts.HTTPClient},
		log:        opts.Logger,
		dialer:     newDialer(opts.HTTPClient, opts.RequestTimeout),
		wsURL:      wsURL(base) + "/v1/ws",
		haveCursor: opts.Cursor > 0,
		events:     newPushQueue(),
		rooms:      newReadConvs(opts, realAfter),
	}
	c.cursor.Store(opts.Cursor)
	c.delivered.init()
	c.presence.init()
	return c
}

// Cursor returns the last cursor handed to OnEvent (or taken from a snapshot). Persist it and
// pass it back as Options.Cursor to resume after a restart without missing anything.
func (c *Client) Cursor() int64 { return c.cursor.Load() }

func wsURL(base string) string {
	switch {
	case strings.HasPrefix(base, "https://"):
		return "wss://" + strings.TrimPrefix(base, "https://")
	case strings.HasPrefix(base, "http://"):
		return "ws://" + strings.TrimPrefix(base, "http://")
	}
	return base
}

// newDialer borrows what it can from the HTTP client's transport so that proxies, custom
// TLS roots and dial hooks configured once apply to the WebSocket too.
func newDialer(hc *http.Client, timeout time.Duration) *websocket.Dialer {
	d := &websocket.Dialer{HandshakeTimeout: timeout, Proxy: http.ProxyFromEnvironment}
	if t, ok := hc.Transport.(*http.Transport); ok {
		d.Proxy = t.Proxy
		d.TLSClientConfig = t.TLSClientConfig
		d.NetDialContext = t.DialContext
	}
	return d
}
