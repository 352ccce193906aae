// Package store defines Parley's storage contract: small role interfaces that every backend
// implements, the rows they exchange, and sentinel errors. Chat rules (validation, who may
// do what, unread arithmetic) live above, in package chat, once for all backends.
//
// The store owns sequencing: AppendMessage assigns a message's seq and its recipients'
// event cursors itself and returns them, and AppendEvent assigns cursors, so that the same
// contract is implementable by one embedded writer with its state in memory and by a SQL
// database with several writers at READ COMMITTED (row-level increments with RETURNING).
//
// The conformance suite in storetest runs unchanged against every backend.
package store

import (
	"context"
	"errors"
)

// Sentinel errors. Backends translate driver errors into these, wrapped with %w.
var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: an insert hit an existing primary or unique key.
	ErrExists = errors.New("store: already exists")
	// ErrUnavailable: the transaction could not be made durable (I/O error, closed store,
	// commit failure). Nothing of it is visible; the caller may retry.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrBadAttachment: an appended message names an attachment that does not exist, is not
	// the sender's, or is not complete. Nothing is stored.
	ErrBadAttachment = errors.New("store: attachment unknown, not the sender's or not complete")
)

// Store is a transactional backend.
type Store interface {
	// Update runs fn in a read-write transaction. When Update returns nil, everything fn wrote
	// is durably stored (fsynced, unless the backend was opened in a documented relaxed mode)
	// and visible to later View and Update calls. When fn returns an error, none of its writes
	// take effect and Update returns that error unchanged. A backend may run several
	// concurrent Update calls in one underlying transaction (group commit), each isolated so
	// that one fn's error undoes only its own writes; fn must therefore do nothing but
	// transaction work and must not keep tx after returning. If the commit itself fails,
	// Update returns an error wrapping ErrUnavailable and nothing of fn is stored.
	// Update calls are serializable: each fn sees the writes of every Update that returned
	// before it started. fn may run on a goroutine of the backend (SQLite runs every fn on
	// its one writer goroutine), so it must not call the Store itself (a nested Update would
	// deadlock) nor call t.Fatal. A method of tx that returns ErrNotFound or ErrExists leaves
	// the transaction usable: fn may handle the error and go on. A backend with several
	// writers may run fn more than once: when the database rolled an attempt back as a
	// whole (a deadlock between transactions), it runs fn again on a new transaction, so fn
	// must leave nothing behind but its writes through tx (set its results, do not append
	// to them).
	Update(ctx context.Context, fn func(tx Tx) error) error
	// View runs fn in a read-only transaction that sees one consistent snapshot.
	View(ctx context.Context, fn func(tx ReadTx) error) error
	// PruneEvents is the retention pass: it removes up to limit events with TS < before,
	// oldest first (a backend may order by a coarser time, such as the hour), raising each
	// affected user's Pruned bound to the highest cursor removed, so that every cursor at or
	// below Pruned is gone, and returns how many it removed. It touches only events no
	// append can write again, so a backend may run it beside its writer rather than as one
	// of its Updates: retention must not hold up sends. Its removals need not be durable
	// when it returns (a crash may bring some back, to be removed again).
	PruneEvents(ctx context.Context, before int64, limit int) (int, error)
	// AppendMessage is the write path of a message, the one call a send makes: the store,
	// not its caller, assigns the message's seq and each member's event cursor, atomically,
	// as a log assigns its sequence numbers. See Appended for what it does and returns.
	// It is durable and visible when it returns, like an Update, and it is isolated from
	// concurrent Updates and AppendMessages as if it ran alone. It is StartAppend followed
	// by Wait.
	AppendMessage(ctx context.Context, m Message) (Appended, error)
	// StartAppend begins AppendMessage(ctx, m) and returns once the append has its place in
	// the store's order, without waiting for it to commit; the result's Wait returns what
	// AppendMessage would have. It lets one caller have several appends in flight (a
	// WebSocket connection's pipelined sends) and still choose their order:
	//
	// Appends started one after another are applied in that order: when one StartAppend
	// returned before another was called (two calls in turn by one goroutine, say), the
	// later append is applied after the earlier one, whatever other appenders and Updates
	// do meanwhile. So into one conversation the later gets the higher seq, in each
	// member's log the higher cursor, and if it repeats the earlier one's (SenderID,
	// ClientMsgID) it is its duplicate. An append that fails takes no seq; those after it
	// may still succeed. Appends started concurrently are ordered as the store likes.
	//
	// StartAppend fails only when it cannot queue the append, and nothing is then stored:
	// ErrUnavailable (the store is closed or broken) or ctx's error. It may block while the
	// backend's queue is full, until ctx ends. Every other outcome (ErrNotMember, a failed
	// commit) comes from Wait. The append goes ahead whether or not Wait is called; if ctx
	// ends before the store has begun it, it is dropped and Wait returns ctx's error.
	//
	// A backend with several writers (PostgreSQL with a batcher per node) keeps the order by
	// queueing appends in start order and applying those of one conversation in that order,
	// on one connection, before it starts those of later batches.
	StartAppend(ctx context.Context, m Message) (PendingAppend, error)
	// Close releases the backend. Calls after Close fail with ErrUnavailable.
	Close() error
}

// ReadTx is what a read-only transaction offers.
type ReadTx interface {
	UserReader
	ConversationReader
	MemberReader
	MarkReader
	MessageReader
	EventReader
	PushReader
	BusKeyReader
	AttachmentReader
	SegmentReader
}

// Tx is what a read-write transaction offers.
type Tx interface {
	ReadTx
	UserWriter
	ConversationWriter
	MemberWriter
	MessageWriter
	EventWriter
	PushWriter
	BusKeyWriter
	AttachmentWriter
	SegmentWriter
}

// User is an account created by the operator.
type User struct {
	ID   string
	Name string
	// TokenGen is the token generation: revoking a user's tokens increments it, and a token
	// is valid only while it carries the current generation.
	TokenGen  int64
	CreatedAt int64 // Unix ms
	// PresenceHidden: the user hides their presence (the "presence": "hidden" setting), so
	// that everyone sees them offline, with no last_active_at.
	PresenceHidden bool
}

// UserReader reads users.
type UserReader interface {
	// User returns the user, or ErrNotFound.
	User(ctx context.Context, id string) (User, error)
}

// UserWriter writes users.
type UserWriter interface {
	// CreateUser inserts u, or returns ErrExists if u.ID exists.
	CreateUser(ctx context.Context, u User) error
	// SetTokenGen sets the user's token generation; ErrNotFound if there is no such user.
	SetTokenGen(ctx context.Context, id string, gen int64) error
	// SetPresenceHidden sets the user's PresenceHidden; ErrNotFound if there is no such user.
	SetPresenceHidden(ctx context.Context, id string, hidden bool) error
}

// Conversation is one conversation's shared state.
type Conversation struct {
	ID           string
	Type         string // protocol.TypeDirect or protocol.TypeGroup
	Name         string
	OwnerID      string
	ReadDetail   bool
	MaxSeq       int64 // seq of the latest message; 0 when none
	MembersCount int
	CreatedAt    int64 // Unix ms
	UpdatedAt    int64 // Unix ms of the latest activity (creation, message, membership)
	// ReadFrom is 0 for a write-fanout conversation, whose every message is an event in
	// every member's log. A read-fanout conversation (a large group) has the first seq whose
	// message is stored once and is in no member's log: AppendMessage writes no event for
	// it, and touches no member row but the sender's (docs/design.md, "Large groups").
	ReadFrom int64
	// Mark is, for a read-fanout conversation, the store-wide change mark of its latest
	// message (MarkReader); 0 before its first one.
	Mark int64
	// RetentionMS is the group's own retention, set by its owner, in ms; 0 follows the
	// operator's (ConversationRetention has the one that applies).
	RetentionMS int64
}

// ReadFanout reports whether c's messages from now on are stored once, without events.
func (c Conversation) ReadFanout() bool { return c.ReadFrom > 0 }

// ConversationReader reads conversations.
type ConversationReader interface {
	// Conversation returns the conversation, or ErrNotFound.
	Conversation(ctx context.Context, id string) (Conversation, error)
}

// ConversationWriter writes conversations.
type ConversationWriter interface {
	// CreateConversation inserts c, or returns ErrExists if c.ID exists.
	CreateConversation(ctx context.Context, c Conversation) error
	// UpdateConversation overwrites every field of the conversation c.ID; ErrNotFound if it
	// does not exist.
	UpdateConversation(ctx context.Context, c Conversation) error
}

// Member is one user's membership of one conversation, with that user's positions.
type Member struct {
	ConvID       string
	UserID       string
	JoinedAt     int64 // Unix ms; with Ordinal it orders members by standing
	Ordinal      int64 // set by the caller: increasing in join order within a conversation
	JoinSeq      int64 // the conversation's max_seq when the user joined
	ClearedSeq   int64 // history at or below it is cleared for this user
	ReadSeq      int64
	DeliveredSeq int64
	Hidden       bool // deleted from this user's list until the next message
}

// Membership is a member row joined with its conversation.
type Membership struct {
	Member
	Conversation Conversation
}

// MarkReader finds what changed in a user's read-fanout conversations. The store keeps one
// change counter, the mark: every message appended to a read-fanout conversation gives the
// conversation the next mark, in the same commit, so that a reader that has seen mark M
// has seen every change with a lower one (docs/design.md, "Large groups").
type MarkReader interface {
	// ReadFanoutChanges returns userID's memberships of read-fanout conversations whose
	// Mark is above after, with the conversation (as Conversation reads it), and the
	// store's latest mark, the position to ask from next time.
	ReadFanoutChanges(ctx context.Context, userID string, after int64) (changed []Membership, mark int64, err error)
}

// MemberReader reads memberships.
type MemberReader interface {
	// Member returns the membership, or ErrNotFound when the user is not a member.
	Member(ctx context.Context, convID, userID string) (Member, error)
	// Members returns every member of the conversation ordered by Ordinal (longest-standing
	// first); empty when the conversation has none or does not exist.
	Members(ctx context.Context, convID string) ([]Member, error)
	// MembersAfter returns up to limit members of the conversation whose Ordinal is above
	// after, in Members order: a page of the member list, read without the rest of it (a
	// large group has 100,000 members). Empty when there are none.
	MembersAfter(ctx context.Context, convID string, after int64, limit int) ([]Member, error)
	// LastOrdinal returns the highest Ordinal among the conversation's members (0 when it
	// has none), the one a member joining next exceeds, without reading the members.
	LastOrdinal(ctx context.Context, convID string) (int64, error)
	// Memberships returns every conversation the user is a member of, hidden ones included,
	// in no particular order.
	Memberships(ctx context.Context, userID string) ([]Membership, error)
}

// MemberWriter writes memberships.
type MemberWriter interface {
	// PutMember inserts or overwrites the membership (m.ConvID, m.UserID).
	PutMember(ctx context.Context, m Member) error
	// DeleteMember removes the membership; ErrNotFound if there is none.
	DeleteMember(ctx context.Context, convID, userID string) error
	// AdvancePositions raises the member's read and delivered positions to at least
	// readSeq and deliveredSeq: each becomes the larger of the stored one and the one
	// asked, so that no caller, however stale its view, moves a position back (SQL:
	// UPDATE ... SET read_seq = max(read_seq, $n)). It returns the member as it then is and
	// whether either position moved; ErrNotFound when the user is not a member.
	AdvancePositions(ctx context.Context, convID, userID string, readSeq, deliveredSeq int64) (Member, bool, error)
}

// Message is one stored message. Content and Extra are raw JSON (Extra an object of
// strings); both nil when absent or recalled.
type Message struct {
	ConvID      string
	Seq         int64
	MsgID       string
	ClientMsgID string
	SenderID    string
	ContentType int
	Content     []byte
	Extra       []byte
	CreatedAt   int64 // Unix ms
	Recalled    bool
	// Mentions are the user ids the sender mentioned, stored as given (nil when none) and
	// kept by a recall. In a read-fanout conversation each mentioned member but the sender
	// gets the message as an event in their log (see Appended); anyone else named is only
	// stored.
	Mentions []string
	// AttachmentID is the attachment the message carries (content types 2 to 5), or empty.
	// An append checks it (ErrBadAttachment) and counts the message in the attachment's
	// Refs; a recall uncounts it. Kept by a recall, so that the count stays right.
	AttachmentID string
}

// MessageRange selects messages of one conversation with Floor < seq, ascending.
// With AfterSeq it returns the first Limit messages with seq > max(AfterSeq, Floor).
// With BeforeSeq > 0 it returns the last Limit messages with Floor < seq < BeforeSeq,
// still in ascending order.
type MessageRange struct {
	Floor     int64
	AfterSeq  int64
	BeforeSeq int64
	Limit     int
}

// MessageReader reads messages.
type MessageReader interface {
	// Message returns the message (convID, seq), or ErrNotFound.
	Message(ctx context.Context, convID string, seq int64) (Message, error)
	// MessageByClientID returns the message that senderID sent with clientMsgID, or
	// ErrNotFound. It is the idempotency lookup.
	MessageByClientID(ctx context.Context, senderID, clientMsgID string) (Message, error)
	// Messages returns the messages selected by r (see MessageRange).
	Messages(ctx context.Context, convID string, r MessageRange) ([]Message, error)
	// MessageAt returns the seq of the conversation's first message with CreatedAt >= ts
	// (Unix ms), or ErrNotFound when every message is older or there is none. A backend
	// answers it with SearchMessageAt; the cold tier's wrapper adds the sealed messages.
	MessageAt(ctx context.Context, convID string, ts int64) (int64, error)
}

// MessageWriter writes messages.
type MessageWriter interface {
	// InsertMessage stores m. ErrExists if (ConvID, Seq) or (SenderID, ClientMsgID) is
	// taken. MsgID is not checked: it is the caller's random 128-bit id, unique without an
	// index that every send would have to write. It stores m.AttachmentID as given and
	// counts nothing: only an append counts a message in its attachment's Refs.
	InsertMessage(ctx context.Context, m Message) error
	// RecallMessage nulls the content and extra of (convID, seq) and marks it recalled;
	// ErrNotFound if there is no such message. The first recall of a message that carries
	// an attachment takes one from the attachment's Refs, and if that leaves none sets its
	// IdleSince to at (Unix ms); a message already recalled changes nothing.
	RecallMessage(ctx context.Context, convID string, seq, at int64) error
}

// Event is one entry of a user's event log.
type Event struct {
	UserID string
	Cursor int64 // assigned by AppendEvent
	Type   string
	ConvID string
	TS     int64 // Unix ms
	// Seq references the message (ConvID, Seq) for "message" events, whose payload is the
	// message itself: it is not copied into every member's log, and a recall shows in it.
	Seq int64
	// Data is the raw JSON payload of every other event type.
	Data []byte
	// Message is filled by EventReader.Events for "message" events.
	Message *Message
}

// CursorBounds describes a user's event log.
type CursorBounds struct {
	Last   int64 // the highest cursor assigned; 0 when none
	Pruned int64 // every event with cursor <= Pruned has been removed by retention
}

// EventReader reads event logs.
type EventReader interface {
	// Events returns up to limit events of the user with cursor > after, ascending, each
	// "message" event (Type "message") with its Message filled in. An unknown user has none.
	Events(ctx context.Context, userID string, after int64, limit int) ([]Event, error)
	// Cursors returns the bounds of the user's log; ErrNotFound for an unknown user.
	Cursors(ctx context.Context, userID string) (CursorBounds, error)
}

// EventWriter writes event logs.
type EventWriter interface {
	// AppendEvent assigns e the user's next cursor (last + 1, gapless), stores it, and
	// returns the cursor. ErrNotFound if e.UserID is not a user.
	AppendEvent(ctx context.Context, e Event) (int64, error)
}

// PushTarget is where one device's offline push notifications go, and how far they have
// gone: the device's push cursor into its user's event log (docs/design.md, "Offline push").
type PushTarget struct {
	UserID   string
	DeviceID string
	Provider string // "apns", "fcm" or "webpush"
	// Token is the APNs device token, the FCM registration token, or the Web Push
	// subscription as JSON ({"endpoint", "keys": {"p256dh", "auth"}}).
	Token        string
	Topic        string // the APNs topic (the app's bundle id); empty for the others
	Locale       string
	RegisteredAt int64 // Unix ms of the registration: an APNs "gone since" older than it removes nothing
	// Cursor is the device's push position: every event of the user's log at or below it has
	// been dealt with (pushed, or judged to need no push). It only moves forward.
	Cursor int64
}

// Mute silences one conversation's pushes for one user until a time.
type Mute struct {
	UserID string
	ConvID string
	Until  int64 // Unix ms; a mute for ever has a far future (chat uses protocol.MuteForever)
}

// PushReader reads push targets and mutes.
type PushReader interface {
	// PushTarget returns the device's target, or ErrNotFound.
	PushTarget(ctx context.Context, userID, deviceID string) (PushTarget, error)
	// PushTargets returns the user's targets ordered by DeviceID; empty when none.
	PushTargets(ctx context.Context, userID string) ([]PushTarget, error)
	// PushTargetsAfter returns up to limit targets of every user, ordered by (UserID,
	// DeviceID), after (afterUser, afterDevice): a page of them all, for the pusher's start
	// and its sweeps. Empty when there are no more.
	PushTargetsAfter(ctx context.Context, afterUser, afterDevice string, limit int) ([]PushTarget, error)
	// Mutes returns the user's mutes, expired ones included, ordered by ConvID.
	Mutes(ctx context.Context, userID string) ([]Mute, error)
}

// PushWriter writes push targets and mutes.
type PushWriter interface {
	// PutPushTarget inserts or overwrites the target (t.UserID, t.DeviceID), every field as
	// given, Cursor included.
	PutPushTarget(ctx context.Context, t PushTarget) error
	// DeletePushTarget removes the target; ErrNotFound if there is none.
	DeletePushTarget(ctx context.Context, userID, deviceID string) error
	// AdvancePushCursor raises the target's Cursor to at least cursor, never lowering it;
	// ErrNotFound if there is no target.
	AdvancePushCursor(ctx context.Context, userID, deviceID string, cursor int64) error
	// PutMute inserts or overwrites the mute (m.UserID, m.ConvID).
	PutMute(ctx context.Context, m Mute) error
	// DeleteMute removes the mute; ErrNotFound if there is none.
	DeleteMute(ctx context.Context, userID, convID string) error
}

// BusKey is one cluster key of the bus between nodes (bus.Sealed): the nodes that share the
// store seal their bus messages with the newest and open them with the newest two. Whoever
// reads the store reads the keys.
type BusKey struct {
	ID        int64  // 1, 2, ...: a rotation adds the next
	Secret    []byte // 32 random bytes
	CreatedAt int64  // Unix ms
}

// BusKeyReader reads the bus's cluster keys.
type BusKeyReader interface {
	// BusKeys returns every key, ascending by ID; empty when none was added.
	BusKeys(ctx context.Context) ([]BusKey, error)
}

// BusKeyWriter adds cluster keys. Keys are never changed once added, so that every node
// reads the same secret under an id.
type BusKeyWriter interface {
	// AddBusKey stores k; ErrExists if a key with k.ID exists, which is how two nodes
	// adding the first key (or rotating) at once end with one key under that id.
	AddBusKey(ctx context.Context, k BusKey) error
}

// Leader is implemented by a backend that several nodes share (PostgreSQL): it elects one
// of them to do a job that must run in one place at a time (the pusher, each device
// pushed by exactly one node). A backend only one process opens has no Leader: that
// process always leads.
type Leader interface {
	// Lead blocks until this process holds the lead for name, or ctx ends (its error). It
	// returns a channel closed when the lead is lost (the database connection that holds it
	// broke); release gives it up. After a loss, call Lead again.
	Lead(ctx context.Context, name string) (lost <-chan struct{}, release func(), err error)
}
