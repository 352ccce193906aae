package bench

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/parleychat/parley/client"
)

// This file is the load tool's correctness side. A load run checks, as it goes, what a chat
// server owes its clients (docs/protocol.md sections 2, 7, 8 and 9):
//
//   - per device, the sync events handed over carry cursors 1 by 1 with no gap or repeat;
//   - per device and conversation, messages arrive once each, in seq order, with no gap;
//   - every acknowledged message reaches every device that was online for it (Check);
//   - two acks never share a (conv_id, seq), and the message a device receives at a seq is
//     the one that was acknowledged with it (a digest of seq and msg_id per conversation);
//   - read positions never move backwards, in read events and in the replies to reads.
//
// Every broken rule is a Violation, counted by a Verifier.

// Violation kinds.
const (
	VCursorGap     = "cursor_gap"     // a device's event cursors skipped one
	VCursorRepeat  = "cursor_repeat"  // a cursor came again or went back
	VSeqGap        = "seq_gap"        // messages of a conversation skipped a seq
	VSeqRepeat     = "seq_repeat"     // a seq came again or out of order (delivered twice)
	VMissing       = "missing"        // acked messages never reached an online device
	VMismatch      = "mismatch"       // the messages a device holds differ from those acked
	VSeqReused     = "seq_reused"     // two acks carry the same seq
	VReadBackwards = "read_backwards" // a read position moved back
	VReset         = "reset"          // the server refused a live cursor (409/410) mid-run
	VBadPage       = "bad_page"       // a sync or history page is out of order or has a hole
	VDropped       = "dropped"        // a connection was closed by the server while in use
	VUnexpected    = "unexpected"     // a push the connection must not get (a body without open, a notice with it)
	VNoticeRate    = "notice_rate"    // more than one notice (or receipts push) per conversation per second
	VNotice        = "notice"         // a notice or receipts push whose figures are wrong
)

// maxSamples bounds the violations kept in full; all are counted.
const maxSamples = 50

// Violation is one broken invariant.
type Violation struct {
	Kind   string `json:"kind"`
	Device string `json:"device,omitempty"`
	ConvID string `json:"conv_id,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	s := v.Kind
	if v.Device != "" {
		s += " device=" + v.Device
	}
	if v.ConvID != "" {
		s += " conv=" + v.ConvID
	}
	return s + ": " + v.Detail
}

// Verifier counts violations and keeps the first few. Safe for concurrent use.
type Verifier struct {
	mu      sync.Mutex // guards the fields below
	count   int64
	byKind  map[string]int64
	samples []Violation
	// OnViolation, if set before use, sees every violation as it is found (progress output).
	OnViolation func(Violation)
}

// NewVerifier returns an empty Verifier.
func NewVerifier() *Verifier { return &Verifier{byKind: make(map[string]int64)} }

// Report records one violation.
func (v *Verifier) Report(vi Violation) {
	v.mu.Lock()
	v.count++
	v.byKind[vi.Kind]++
	if len(v.samples) < maxSamples {
		v.samples = append(v.samples, vi)
	}
	cb := v.OnViolation
	v.mu.Unlock()
	if cb != nil {
		cb(vi)
	}
}

// Reportf records a violation with a formatted detail.
func (v *Verifier) Reportf(kind, device, convID, format string, args ...any) {
	v.Report(Violation{Kind: kind, Device: device, ConvID: convID, Detail: fmt.Sprintf(format, args...)})
}

// Count returns how many violations were reported.
func (v *Verifier) Count() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.count
}

// Summary returns the count, the count by kind and the samples kept.
func (v *Verifier) Summary() (int64, map[string]int64, []Violation) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.count, maps.Clone(v.byKind), slices.Clone(v.samples)
}

// merge adds counts and samples from another process's verifier.
func (v *Verifier) merge(count int64, byKind map[string]int64, samples []Violation) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.count += count
	for k, n := range byKind {
		v.byKind[k] += n
	}
	for _, s := range samples {
		if len(v.samples) < maxSamples {
			v.samples = append(v.samples, s)
		}
	}
}

// digest identifies one message: seq and msg_id hashed together. A conversation's digest is
// the XOR of its messages' digests, so it is the same whatever order they are added in and
// whichever process added them.
func digest(seq int64, msgID string) uint64 {
	// FNV-1a (hash/fnv's New64a) over seq's 8 bytes, little-endian, then msgID's, inline:
	// it runs for every ack and every delivery, and the hash.Hash would allocate.
	const prime = 1099511628211
	x := uint64(14695981039346656037)
	for i := range 8 {
		x ^= uint64(seq) >> (8 * i) & 0xff
		x *= prime
	}
	for i := 0; i < len(msgID); i++ {
		x ^= uint64(msgID[i])
		x *= prime
	}
	// splitmix64 finaliser: FNV's low bits are weak, and XOR-ing them would show it.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// RecvSummary is what one device received in one conversation: messages with seq in
// (base, Last], Count of them, and the XOR of their digests.
type RecvSummary struct {
	Device string `json:"device"`
	User   string `json:"user"`
	ConvID string `json:"conv_id"`
	Base   int64  `json:"base"`
	Last   int64  `json:"last"`
	Count  int64  `json:"count"`
	Digest uint64 `json:"digest"`
}

// Stream checks the event stream of one device as the SDK hands it to OnEvent. Safe for
// concurrent use (the SDK calls it from one goroutine; the drain reads it from another).
type Stream struct {
	v      *Verifier
	device string
	user   string

	mu     sync.Mutex // guards the fields below
	cursor int64      // last cursor seen; 0 before the first snapshot or event
	resets int
	convs  map[string]*RecvSummary // watched conversations
	reads  map[posKey]int64        // (conv, user) -> highest read_seq seen in events

	// The targets of the one Caught waiter, if any: how many watched conversations are still
	// below theirs, and the channel closed once none is. Each message then costs the
	// checker one lookup rather than a wake-up of the waiter and a scan of every
	// conversation (a reconnect brings thousands of messages over hundreds of them).
	want   map[string]int64
	behind int
	caught chan struct{}
}

type posKey struct{ conv, user string }

// NewStream returns the checker of device (a label for reports) of user.
func NewStream(v *Verifier, user, device string) *Stream {
	return &Stream{
		v: v, device: device, user: user,
		convs: make(map[string]*RecvSummary), reads: make(map[posKey]int64),
	}
}

// Watch makes the stream check the messages of convID, expecting seqs from base+1 on.
// Messages of conversations not watched are ignored.
func (s *Stream) Watch(convID string, base int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[convID]; !ok {
		s.convs[convID] = &RecvSummary{Device: s.device, User: s.user, ConvID: convID, Base: base, Last: base}
	}
}

// Reset records a snapshot the session started from. The first one sets the starting
// cursor; a later one means the server refused a cursor it had handed out.
func (s *Stream) Reset(cursor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resets > 0 || s.cursor > 0 {
		s.v.Reportf(VReset, s.device, "", "session reset to a snapshot at cursor %d after cursor %d", cursor, s.cursor)
	}
	s.resets++
	s.cursor = cursor
}

// Resume sets the starting cursor of a device that resumes from a known cursor.
func (s *Stream) Resume(cursor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cursor == 0 {
		s.cursor = cursor
	}
}

// Cursor returns the last cursor seen.
func (s *Stream) Cursor() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// Event checks one event. For a message in a watched conversation it returns the message
// and true (false otherwise) so that the caller can measure it.
func (s *Stream) Event(ev client.SyncEvent) (client.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cursor == 0 && s.resets == 0:
		// No starting point known: accept the first cursor as it comes.
	case ev.Cursor <= s.cursor:
		s.v.Reportf(VCursorRepeat, s.device, ev.ConvID, "cursor %d after %d", ev.Cursor, s.cursor)
		return client.Message{}, false
	case ev.Cursor > s.cursor+1:
		s.v.Reportf(VCursorGap, s.device, ev.ConvID, "cursor %d after %d: %d events missing", ev.Cursor, s.cursor, ev.Cursor-s.cursor-1)
	}
	s.cursor = ev.Cursor
	switch ev.Type {
	case client.EventMessage:
		return s.messageLocked(ev)
	case client.EventRead:
		if d, err := ev.Read(); err == nil {
			k := posKey{ev.ConvID, d.UserID}
			if prev := s.reads[k]; d.ReadSeq < prev {
				s.v.Reportf(VReadBackwards, s.device, ev.ConvID, "read event for %s: %d after %d", d.UserID, d.ReadSeq, prev)
			} else {
				s.reads[k] = d.ReadSeq
			}
		}
	}
	return client.Message{}, false
}

func (s *Stream) messageLocked(ev client.SyncEvent) (client.Message, bool) {
	m, err := ev.Message()
	if err != nil {
		s.v.Reportf(VMismatch, s.device, ev.ConvID, "undecodable message event at cursor %d: %v", ev.Cursor, err)
		return client.Message{}, false
	}
	return s.acceptLocked(m)
}

// Push checks a message pushed in full outside the event log (a read-fanout conversation
// the connection has open): no cursor, but the same rules per conversation as events, once
// each, in seq order, with no gap. It returns the message and true when it is new in a
// watched conversation.
func (s *Stream) Push(m client.Message) (client.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acceptLocked(m)
}

// acceptLocked checks message m of a watched conversation against the seqs seen so far.
func (s *Stream) acceptLocked(m client.Message) (client.Message, bool) {
	r := s.convs[m.ConvID]
	if r == nil {
		return client.Message{}, false
	}
	switch {
	case m.Seq <= r.Last:
		s.v.Reportf(VSeqRepeat, s.device, m.ConvID, "seq %d after %d", m.Seq, r.Last)
		return client.Message{}, false
	case m.Seq > r.Last+1:
		s.v.Reportf(VSeqGap, s.device, m.ConvID, "seq %d after %d: %d messages missing", m.Seq, r.Last, m.Seq-r.Last-1)
	}
	prev := r.Last
	r.Last = m.Seq
	r.Count++
	r.Digest ^= digest(m.Seq, m.MsgID)
	if t, ok := s.want[m.ConvID]; ok && prev < t && r.Last >= t {
		if s.behind--; s.behind == 0 {
			s.stopWaitLocked()
		}
	}
	return m, true
}

// stopWaitLocked wakes the Caught waiter, if any, and forgets its targets.
func (s *Stream) stopWaitLocked() {
	if s.caught != nil {
		close(s.caught)
	}
	s.want, s.behind, s.caught = nil, 0, nil
}

// Last returns the highest seq received in convID (its base if none).
func (s *Stream) Last(convID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.convs[convID]; r != nil {
		return r.Last
	}
	return 0
}

// Caught reports whether every watched conversation with a target has reached it, and
// returns a channel closed once they all have otherwise. A stream serves one waiter: a new
// call wakes the previous one (which then calls again).
func (s *Stream) Caught(targets map[string]int64) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopWaitLocked()
	behind := 0
	for id, r := range s.convs {
		if t, ok := targets[id]; ok && r.Last < t {
			behind++
		}
	}
	if behind == 0 {
		return true, nil
	}
	s.want, s.behind, s.caught = targets, behind, make(chan struct{})
	return false, s.caught
}

// Holds reports whether every watched conversation with a target has reached it. Unlike
// Caught it leaves the waiter alone, so that anyone may ask.
func (s *Stream) Holds(targets map[string]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.convs {
		if t, ok := targets[id]; ok && r.Last < t {
			return false
		}
	}
	return true
}

// Convs returns the watched conversations.
func (s *Stream) Convs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.convs))
}

// Summaries returns what the device received, one entry per watched conversation.
func (s *Stream) Summaries() []RecvSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecvSummary, 0, len(s.convs))
	for _, id := range slices.Sorted(maps.Keys(s.convs)) {
		out = append(out, *s.convs[id])
	}
	return out
}

// Positions checks the positions the server returns to read (or delivered) calls: each
// reply is at least the seq asked for (when that seq exists) and at least every earlier
// reply for the same (conversation, user). Safe for concurrent use.
type Positions struct {
	v    *Verifier
	mu   sync.Mutex // guards last
	last map[posKey]int64
}

// NewPositions returns an empty position checker.
func NewPositions(v *Verifier) *Positions {
	return &Positions{v: v, last: make(map[posKey]int64)}
}

// Reply checks that a read of asked (a seq known to exist) by user returned got.
func (p *Positions) Reply(convID, user string, asked, got int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := posKey{convID, user}
	prev := p.last[k]
	switch {
	case got < prev:
		p.v.Reportf(VReadBackwards, user, convID, "read reply %d after an earlier reply of %d", got, prev)
	case got < asked:
		p.v.Reportf(VReadBackwards, user, convID, "read of seq %d answered with position %d", asked, got)
	}
	p.last[k] = max(prev, got)
}

// AckSummary is what the senders of one conversation were acknowledged: Count acks with
// seqs in (Base, Max], the XOR of their digests, and the count by sender.
type AckSummary struct {
	Base     int64            `json:"base"`
	Count    int64            `json:"count"`
	Max      int64            `json:"max"`
	Digest   uint64           `json:"digest"`
	BySender map[string]int64 `json:"by_sender"`
}

// Ledger collects the acks of one process. Safe for concurrent use.
type Ledger struct {
	v     *Verifier
	mu    sync.Mutex // guards convs and seen
	convs map[string]*AckSummary
	seen  map[string][]uint64 // conv -> bitset of seq-base acked
}

// NewLedger returns an empty ledger.
func NewLedger(v *Verifier) *Ledger {
	return &Ledger{v: v, convs: make(map[string]*AckSummary), seen: make(map[string][]uint64)}
}

// Watch declares convID with the seq its messages start after.
func (l *Ledger) Watch(convID string, base int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.convs[convID]; !ok {
		l.convs[convID] = &AckSummary{Base: base, Max: base, BySender: map[string]int64{}}
	}
}

// Ack records an ack received by sender. A seq acked twice is a violation, unless the ack
// says it is a duplicate of the same message (an SDK retry).
func (l *Ledger) Ack(sender string, ack client.MessageAck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.convs[ack.ConvID]
	if a == nil {
		a = &AckSummary{BySender: map[string]int64{}}
		l.convs[ack.ConvID] = a
	}
	i := ack.Seq - a.Base - 1
	if i < 0 {
		l.v.Reportf(VSeqReused, sender, ack.ConvID, "ack seq %d is not above the conversation's starting seq %d", ack.Seq, a.Base)
		return
	}
	bits := l.seen[ack.ConvID]
	for int64(len(bits))*64 <= i {
		bits = append(bits, 0)
	}
	l.seen[ack.ConvID] = bits
	if bits[i/64]&(1<<(i%64)) != 0 {
		if !ack.Duplicate {
			l.v.Reportf(VSeqReused, sender, ack.ConvID, "seq %d acked twice (msg_id %s)", ack.Seq, ack.MsgID)
		}
		return
	}
	bits[i/64] |= 1 << (i % 64)
	a.Count++
	a.Max = max(a.Max, ack.Seq)
	a.Digest ^= digest(ack.Seq, ack.MsgID)
	a.BySender[sender]++
}

// Summaries returns a copy of the ledger.
func (l *Ledger) Summaries() map[string]*AckSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]*AckSummary, len(l.convs))
	for id, a := range l.convs {
		c := *a
		c.BySender = maps.Clone(a.BySender)
		out[id] = &c
	}
	return out
}

// Max returns the highest acked seq per conversation.
func (l *Ledger) Max() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.convs))
	for id, a := range l.convs {
		out[id] = a.Max
	}
	return out
}

// MergeAcks adds the ack summaries of several processes. Acks of one conversation from two
// processes are added up; more acks than seqs means two acks shared a seq.
func MergeAcks(parts ...map[string]*AckSummary) map[string]*AckSummary {
	out := make(map[string]*AckSummary)
	for _, part := range parts {
		for id, a := range part {
			m := out[id]
			if m == nil {
				m = &AckSummary{Base: a.Base, Max: a.Base, BySender: map[string]int64{}}
				out[id] = m
			}
			m.Count += a.Count
			m.Max = max(m.Max, a.Max)
			m.Digest ^= a.Digest
			for s, n := range a.BySender {
				m.BySender[s] += n
			}
		}
	}
	return out
}

// Check compares what devices received with what was acked, after the drain: every device
// in recvs must hold every acked message of the conversation, and when every seq of the
// conversation was acked (no send of unknown outcome), exactly those messages. It returns
// the deliveries expected: per acked message, one per device in recvs not of its sender.
func Check(v *Verifier, acks map[string]*AckSummary, recvs []RecvSummary) (expected int64) {
	for id, a := range acks {
		if a.Count > a.Max-a.Base {
			v.Reportf(VSeqReused, "", id, "%d acks for the %d seqs %d..%d", a.Count, a.Max-a.Base, a.Base+1, a.Max)
		}
	}
	for _, r := range recvs {
		a := acks[r.ConvID]
		if a == nil || a.Count == 0 {
			continue
		}
		expected += a.Count - a.BySender[r.User]
		exact := a.Count == a.Max-a.Base && r.Base == a.Base
		switch {
		case r.Last < a.Max:
			v.Reportf(VMissing, r.Device, r.ConvID, "received up to seq %d, acked up to %d: %d acked messages never arrived", r.Last, a.Max, a.Max-r.Last)
		case exact && r.Last == a.Max && (r.Count != a.Count || r.Digest != a.Digest):
			v.Reportf(VMismatch, r.Device, r.ConvID, "received %d messages, acked %d, digests %016x/%016x", r.Count, a.Count, r.Digest, a.Digest)
		}
	}
	return expected
}
