package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
)

// Key layout
//
// Every key starts with a one-byte table prefix, followed by its components:
//
//	u  enc(user)                          -> user row: name, token_gen, created_at[, presence_hidden]
//	n  enc(user)                          -> the user's event log bounds: last, pruned
//	c  enc(conv)                          -> conversation row (every field but the id)
//	m  enc(conv) enc(user)                -> member row (positions, ordinal, hidden)
//	M  enc(user) enc(conv)                -> empty: members by user, for Memberships
//	r  enc(conv) enc(user)                -> empty: the roster of a conversation, for Members
//	o  enc(conv) int(ordinal) enc(user)   -> empty: members by standing, for MembersAfter and LastOrdinal (layout 2)
//	g  enc(conv) int(seq)                 -> message row (every field but conv and seq)
//	i  enc(msg_id)                        -> enc(conv) int(seq): written by layout 1 only
//	k  enc(sender) enc(client_msg_id)     -> enc(conv) int(seq): unique (sender, client_msg_id)
//	e  enc(user) int(cursor)              -> event row: type, conv, ts, seq, data
//	h  int(hour) enc(user)                -> empty: the user has events of that hour, for PruneEvents
//	t  int(ts) enc(user) int(cursor)      -> empty: events by time, written by layout 1 only
//	v                                     -> layout version (uvarint)
//	p  enc(user) enc(device)              -> push target: provider, token, topic, locale, registered_at, cursor
//	s  enc(user) enc(conv)                -> mute: until
//	a  enc(attachment)                    -> attachment row (every field but the id)
//	U  enc(owner) int(created_at) enc(id) -> size: attachments by owner and age, for AttachmentUsage
//	I  int(idle_since) enc(id)            -> empty: attachments with Refs 0, for IdleAttachments
//	A  enc(attachment) enc(conv) int(seq) -> empty: the unrecalled messages that carry it, for AttachmentRefs
//	B  enc(key)                           -> segment row (every field but the key), pending or sealed
//	P  enc(key)                           -> empty: a pending segment, for PendingSegments
//	S  enc(conv) int(last_seq)            -> the key: a sealed segment, for Segments and LastSegment
//	W  enc(conv) int(last_ts) int(last_seq) -> the key: a sealed segment by time, for SegmentAtTime
//	O  enc(conv) int(seq)                 -> message row: the overlay of a cold message (store.SegmentReader)
//
// int(x) is the int64 as 8 big-endian bytes with the sign bit flipped, so that byte order
// is numeric order for every int64, negative ones included. enc(s) is the string with each
// 0x00 byte written as 0x00 0xFF, followed by the terminator 0x00 0x01: no encoded string is
// a prefix of another, and byte order of encodings is the order of the strings, so a prefix
// scan over "m enc(conv)" can never run into a conversation whose id merely starts with the
// same bytes. Parley's ids are [A-Za-z0-9_.@-] and never contain 0x00, so in practice enc
// only appends two bytes; the escape keeps the layout unambiguous for any string.
//
// The bounds key n is written by CreateUser and exists exactly when the user does; it holds
// the Pruned bound, raised by PruneEvents, and a Last that may be stale: an event does not
// rewrite it. The user's last cursor is the highest of n's Last and Pruned and of the
// user's newest event key e (txn.cursors), so that appending an event writes one key, not
// two. The hour hint h is written with the first event of each hour a user gets (an Update
// may write it again: it is only a hint) and removed by PruneEvents once that hour is past
// the retention bound and the user's events of it are gone; where layout 1 wrote one time
// index entry t per event, an event now costs no index entry at all. Keys m and M, g and k
// are always written and removed together, and so are m and r, and m and o (o carries the
// row's ordinal): an index entry exists
// exactly when its row does. Keys i were a msg_id index that nothing read; databases from before
// they were dropped still hold them, unused.
//
// The push keys p and s came after layout 2 without a new version: they are tables of
// their own, which a database without them simply lacks and an older binary never reads.
// So did the attachment keys a, U, I and A. U is written and removed with a. I exists
// exactly while the row's Refs is 0, under its IdleSince: CreateAttachment writes it, the
// append that takes Refs from 0 to 1 removes it, the recall that brings Refs back to 0
// writes it again, DeleteAttachment removes it. A exists exactly for each message that an
// append counted in the row's Refs and that is not recalled: the append writes it, the
// recall removes it (and uncounts only a message that has it: InsertMessage counts nothing).
//
// The cold tier's keys B, P, S, W and O came after layout 2 without a new version too. B
// is a segment's row under its blob key; P exists exactly while it is pending, S and W
// exactly while it is sealed, so that no read of the index filters one state out of the
// other. W is one seek for SegmentAtTime: the messages' times never go down in seq order
// (store.DecideAppend), so neither do the LastTS of a conversation's contiguous segments,
// and the first W key at or after (conv, ts) is the first segment by seq too. SealSegment
// removes the message rows g and client-id keys k of the segment but not their attachment
// keys A, which stay until a recall of the cold message (PutOverlay) or DeleteAttachment;
// and as g no longer holds the newest message once every hot one is sealed, it first
// writes into the conversation row and the newest sender's member row what that message
// implied (txn.newest), so that nothing read ever depended on a message that is gone.
//
// Members scans the roster r, never the member rows m themselves: a member row is rewritten
// on every read-position update (and the sender's on every send), so the memtable holds many
// versions of it and an iterator steps over every one of them, while a point read of the
// newest version seeks straight to it. Roster entries are written once, when a member joins.
//
// Values are a compact binary encoding (codec.go): signed varints for integers, a uvarint
// length before strings, and a uvarint length+1 (0 for nil) before optional byte slices,
// so that nil and empty survive a round trip.
const (
	tUser         byte = 'u'
	tBounds       byte = 'n'
	tConversation byte = 'c'
	tMember       byte = 'm'
	tMemberByUser byte = 'M'
	tRoster       byte = 'r'
	tMessage      byte = 'g'
	tClientID     byte = 'k'
	tEvent        byte = 'e'
	tEventByTime  byte = 't'
	tEventByHour  byte = 'h'
	tVersion      byte = 'v'
	tReadFanout   byte = 'R' // R enc(user) enc(conv): the user is a member of a read-fanout conversation
	tMark         byte = 'x' // x: the store's latest mark (store.MarkReader)
	tStanding     byte = 'o' // o enc(conv) int(ordinal) enc(user): members by standing
	tPushTarget   byte = 'p' // p enc(user) enc(device): a device's push target (store.PushReader)
	tMute         byte = 's' // s enc(user) enc(conv): a muted conversation (store.PushReader)
	tBusKey       byte = 'b' // b int(id): a cluster key of the bus (store.BusKeyReader)

	tAttachment      byte = 'a' // a enc(id): an attachment row (store.AttachmentReader)
	tAttachmentUsage byte = 'U' // U enc(owner) int(created_at) enc(id): its size, for AttachmentUsage
	tAttachmentIdle  byte = 'I' // I int(idle_since) enc(id): an attachment with Refs 0
	tAttachmentRef   byte = 'A' // A enc(id) enc(conv) int(seq): a message counted in its Refs

	tSegment      byte = 'B' // B enc(key): a segment row (store.SegmentReader)
	tPending      byte = 'P' // P enc(key): a pending segment
	tSealed       byte = 'S' // S enc(conv) int(last_seq): a sealed segment's key
	tSealedByTime byte = 'W' // W enc(conv) int(last_ts) int(last_seq): a sealed segment's key
	tOverlay      byte = 'O' // O enc(conv) int(seq): the overlay of a cold message
)

// layoutVersion is the version of the key layout and value encoding stored under key v.
// Open refuses a database written by a newer layout, and brings an older one up to date:
// layout 2 adds the standing index o, which Open builds from the member rows of a layout 1
// database (upgradeLayout).
const layoutVersion = 2

// errCorrupt reports a key or value that does not decode.
var errCorrupt = errors.New("malformed stored data")

// appendInt appends x in 8 bytes whose byte order is x's numeric order.
func appendInt(b []byte, x int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(x)^(1<<63))
}

// readInt decodes what appendInt wrote at the start of b.
func readInt(b []byte) (int64, []byte, error) {
	if len(b) < 8 {
		return 0, nil, errCorrupt
	}
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)), b[8:], nil
}

// appendStr appends enc(s): s with 0x00 escaped as 0x00 0xFF, then 0x00 0x01.
func appendStr(b []byte, s string) []byte {
	for {
		i := indexZero(s)
		if i < 0 {
			break
		}
		b = append(b, s[:i]...)
		b = append(b, 0x00, 0xFF)
		s = s[i+1:]
	}
	b = append(b, s...)
	return append(b, 0x00, 0x01)
}

func indexZero(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return i
		}
	}
	return -1
}

// readStr decodes what appendStr wrote at the start of b.
func readStr(b []byte) (string, []byte, error) {
	i := bytes.IndexByte(b, 0)
	if i >= 0 && i+1 < len(b) && b[i+1] == 0x01 {
		return string(b[:i]), b[i+2:], nil // the usual case: no escaped byte
	}
	var out []byte
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 || i+1 >= len(b) {
			return "", nil, errCorrupt
		}
		out = append(out, b[:i]...)
		switch b[i+1] {
		case 0x01:
			return string(out), b[i+2:], nil
		case 0xFF:
			out = append(out, 0)
			b = b[i+2:]
		default:
			return "", nil, errCorrupt
		}
	}
}

// Key builders. Each appends the whole key to b (usually a reused scratch buffer).

func userKey(b []byte, id string) []byte   { return appendStr(append(b, tUser), id) }
func boundsKey(b []byte, id string) []byte { return appendStr(append(b, tBounds), id) }
func convKey(b []byte, id string) []byte   { return appendStr(append(b, tConversation), id) }

func memberKey(b []byte, conv, user string) []byte {
	return appendStr(appendStr(append(b, tMember), conv), user)
}

func rosterKey(b []byte, conv, user string) []byte {
	return appendStr(appendStr(append(b, tRoster), conv), user)
}

func standingKey(b []byte, conv string, ordinal int64, user string) []byte {
	return appendStr(appendInt(appendStr(append(b, tStanding), conv), ordinal), user)
}

func readFanoutKey(b []byte, user, conv string) []byte {
	return appendStr(appendStr(append(b, tReadFanout), user), conv)
}

func memberByUserKey(b []byte, user, conv string) []byte {
	return appendStr(appendStr(append(b, tMemberByUser), user), conv)
}

// msgRef is the part of a message key after its prefix: enc(conv) int(seq). The unique
// indexes store it as their value.
func msgRef(b []byte, conv string, seq int64) []byte { return appendInt(appendStr(b, conv), seq) }

// readMsgRef decodes what msgRef wrote, which must be the whole of b.
func readMsgRef(b []byte) (conv string, seq int64, err error) {
	conv, rest, err := readStr(b)
	if err == nil {
		seq, rest, err = readInt(rest)
	}
	if err == nil && len(rest) != 0 {
		err = errCorrupt
	}
	return conv, seq, err
}

func messageKey(b []byte, conv string, seq int64) []byte {
	return msgRef(append(b, tMessage), conv, seq)
}

func clientIDKey(b []byte, sender, clientMsgID string) []byte {
	return appendStr(appendStr(append(b, tClientID), sender), clientMsgID)
}

func eventKey(b []byte, user string, cursor int64) []byte {
	return appendInt(appendStr(append(b, tEvent), user), cursor)
}

func eventByTimeKey(b []byte, ts int64, user string, cursor int64) []byte {
	return appendInt(appendStr(appendInt(append(b, tEventByTime), ts), user), cursor)
}

// hourMS is the span of an hour hint.
const hourMS = 3_600_000

// hourOf returns the hour (Unix ms / hourMS, rounded down) that ts falls in.
func hourOf(ts int64) int64 {
	h := ts / hourMS
	if ts%hourMS < 0 {
		h--
	}
	return h
}

func eventHourKey(b []byte, hour int64, user string) []byte {
	return appendStr(appendInt(append(b, tEventByHour), hour), user)
}

func pushTargetKey(b []byte, user, device string) []byte {
	return appendStr(appendStr(append(b, tPushTarget), user), device)
}

func muteKey(b []byte, user, conv string) []byte {
	return appendStr(appendStr(append(b, tMute), user), conv)
}

func attachmentKey(b []byte, id string) []byte { return appendStr(append(b, tAttachment), id) }

func attachmentUsageKey(b []byte, owner string, createdAt int64, id string) []byte {
	return appendStr(appendInt(appendStr(append(b, tAttachmentUsage), owner), createdAt), id)
}

func attachmentIdleKey(b []byte, idleSince int64, id string) []byte {
	return appendStr(appendInt(append(b, tAttachmentIdle), idleSince), id)
}

func attachmentRefKey(b []byte, id, conv string, seq int64) []byte {
	return msgRef(appendStr(append(b, tAttachmentRef), id), conv, seq)
}

func segmentKey(b []byte, key string) []byte { return appendStr(append(b, tSegment), key) }
func pendingKey(b []byte, key string) []byte { return appendStr(append(b, tPending), key) }

func sealedKey(b []byte, conv string, lastSeq int64) []byte {
	return msgRef(append(b, tSealed), conv, lastSeq)
}

func sealedByTimeKey(b []byte, conv string, lastTS, lastSeq int64) []byte {
	return appendInt(appendInt(appendStr(append(b, tSealedByTime), conv), lastTS), lastSeq)
}

func overlayKey(b []byte, conv string, seq int64) []byte {
	return msgRef(append(b, tOverlay), conv, seq)
}

var versionKey = []byte{tVersion}

// prefixEnd returns the smallest key greater than every key that starts with prefix, for
// use as an exclusive upper bound. Every prefix used here ends with an enc terminator or a
// table byte, never with 0xFF, so incrementing the last byte is enough.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // no upper bound
}

// succ returns x+1 and whether it did not overflow.
func succ(x int64) (int64, bool) {
	if x == math.MaxInt64 {
		return 0, false
	}
	return x + 1, true
}
