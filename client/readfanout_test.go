package client

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/protocol"
)

// fakeClock stands in for time.AfterFunc in the read-fanout puller: every delay asked for is
// reported on scheduled, and runs only when the test fires it, so tests never sleep.
type fakeClock struct {
	scheduled chan time.Duration
	mu        sync.Mutex // guards timers
	timers    []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{scheduled: make(chan time.Duration, 64)} }

func (k *fakeClock) after(d time.Duration, f func()) func() bool {
	t := &fakeTimer{d: d, f: f}
	k.mu.Lock()
	k.timers = append(k.timers, t)
	k.mu.Unlock()
	k.scheduled <- d
	return func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire runs every timer not stopped or fired yet and returns how many ran.
func (k *fakeClock) fire() int {
	k.mu.Lock()
	var run []*fakeTimer
	for _, t := range k.timers {
		if !t.stopped {
			t.stopped = true
			run = append(run, t)
		}
	}
	k.mu.Unlock()
	for _, t := range run {
		t.f()
	}
	return len(run)
}

// readSession is a connected client whose snapshot holds read-fanout group g1 at maxSeq, with
// its events, briefs and receipts collected on channels and its clock in the test's hands.
type readSession struct {
	f        *fakeServer
	c        *Client
	clock    *fakeClock
	fc       *fakeConn
	evs      chan SyncEvent
	briefs   chan ConversationBrief
	receipts chan []Receipts
}

func groupBrief(maxSeq, unread int64) ConversationBrief {
	return ConversationBrief{
		ConvID: "g1", Type: protocol.TypeGroup, Name: "All hands", MembersCount: 1000,
		Fanout: protocol.FanoutRead, MaxSeq: maxSeq, Unread: unread,
	}
}

func startReadSession(t *testing.T, maxSeq int64, opts Options) *readSession {
	t.Helper()
	f := newFake(t)
	f.snapshotMark = 7
	f.snapshotConvs = []ConversationBrief{groupBrief(maxSeq, 0)}
	f.addGroupMessages("g1", maxSeq)
	s := &readSession{
		f: f, clock: newFakeClock(), evs: make(chan SyncEvent, 1024),
		briefs: make(chan ConversationBrief, 1024), receipts: make(chan []Receipts, 16),
	}
	opts.OnEvent = func(ev SyncEvent) { s.evs <- ev }
	opts.OnConversation = func(b ConversationBrief) { s.briefs <- b }
	opts.OnReceipts = func(_ string, rs []Receipts) { s.receipts <- rs }
	s.c = f.client(t, opts)
	s.c.rooms.after = s.clock.after // before the session starts: no race
	if err := s.c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s.fc = recv(t, f.conns, "connection")
	return s
}

func (s *readSession) pushJSON(t *testing.T, v any) {
	t.Helper()
	s.fc.write(v)
}

func (s *readSession) notice(t *testing.T, maxSeq, unread, delayMS int64) {
	s.pushJSON(t, map[string]any{"op": "notice", "conv_id": "g1", "max_seq": maxSeq, "unread": unread, "members_count": 1001, "pull_delay_ms": delayMS})
}

func (s *readSession) pushMessage(t *testing.T, seq int64) {
	s.pushJSON(t, map[string]any{"op": "message", "message": groupMsg("g1", seq, "bob")})
}

// expectSeqs receives len(want) events and checks they are g1's messages want, in order,
// without a cursor.
func (s *readSession) expectSeqs(t *testing.T, want ...int64) {
	t.Helper()
	for _, w := range want {
		ev := recv(t, s.evs, "read-fanout message")
		m, err := ev.Message()
		if err != nil || ev.Cursor != 0 || m.ConvID != "g1" || m.Seq != w {
			t.Fatalf("got event cursor %d type %s seq %d (%v), want g1 seq %d without cursor", ev.Cursor, ev.Type, m.Seq, err, w)
		}
	}
}

// awaitBrief receives briefs until one satisfies ok.
func (s *readSession) awaitBrief(t *testing.T, what string, ok func(ConversationBrief) bool) ConversationBrief {
	t.Helper()
	for {
		if b := recv(t, s.briefs, what); ok(b) {
			return b
		}
	}
}

// expectHistory checks the after_seq of every history request so far.
func (s *readSession) expectHistory(t *testing.T, why string, want ...int64) {
	t.Helper()
	if got := s.historyAfter(); !slices.Equal(got, want) {
		t.Errorf("history after_seq %v, want %v (%s)", got, want, why)
	}
}

// stop ends the session and checks that nothing more was handed to OnEvent.
func (s *readSession) stop(t *testing.T) {
	t.Helper()
	if err := s.c.Close(); err != nil {
		t.Fatal(err)
	}
	expectNoMore(t, s.evs)
}

func (s *readSession) historyAfter() []int64 {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return slices.Clone(s.f.historyAfter)
}

func TestReadFanoutNoticeWaitsPullDelayThenFetchesHistory(t *testing.T) {
	s := startReadSession(t, 2, Options{})
	s.f.historyPage = 2
	s.f.addGroupMessages("g1", 7)

	s.notice(t, 5, 3, 1840)
	if d := recv(t, s.clock.scheduled, "pull timer"); d != 1840*time.Millisecond {
		t.Fatalf("pull scheduled after %v, want the notice's 1840ms", d)
	}
	// The counters change at once, before any fetch.
	b := s.awaitBrief(t, "brief after notice", func(b ConversationBrief) bool { return b.MaxSeq == 5 })
	if b.Unread != 3 {
		t.Errorf("after the notice: unread %d, want 3", b.Unread)
	}
	// A second notice while the first waits is coalesced: no new timer, newest counters.
	s.notice(t, 7, 5, 10)
	s.awaitBrief(t, "brief after second notice", func(b ConversationBrief) bool { return b.MaxSeq == 7 && b.Unread == 5 })
	if got := s.historyAfter(); len(got) != 0 {
		t.Fatalf("history fetched before the pull delay ran out: after_seq %v", got)
	}
	select {
	case d := <-s.clock.scheduled:
		t.Fatalf("a second pull was scheduled (%v) instead of coalescing", d)
	default:
	}

	if n := s.clock.fire(); n != 1 {
		t.Fatalf("%d timers fired, want 1", n)
	}
	s.expectSeqs(t, 3, 4, 5, 6, 7)
	s.expectHistory(t, "pages after the last seq held, up to max_seq", 2, 4, 6)
	s.stop(t)
}

func TestReadFanoutPushesFillGapsAndDropRepeats(t *testing.T) {
	s := startReadSession(t, 0, Options{})
	s.f.addGroupMessages("g1", 2)
	s.f.briefs["g1"] = groupBrief(2, 2)
	if _, err := s.c.OpenConversation(testCtx(t), "g1"); err != nil {
		t.Fatal(err)
	}
	s.expectSeqs(t, 1, 2) // what came before the open, fetched at once

	s.f.addGroupMessages("g1", 6)
	s.pushMessage(t, 3)
	s.expectSeqs(t, 3)
	s.pushMessage(t, 5) // skips 4: fetched first
	s.expectSeqs(t, 4, 5)
	s.pushMessage(t, 4) // repeats
	s.pushMessage(t, 5)
	s.pushMessage(t, 3)
	s.pushMessage(t, 6)
	s.expectSeqs(t, 6)
	s.expectHistory(t, "the open's catch-up, then the gap", 0, 3)
	s.stop(t)
}

func TestReadFanoutHonoursRetryAfter(t *testing.T) {
	s := startReadSession(t, 0, Options{})
	s.f.addGroupMessages("g1", 2)
	s.f.historyFail = []int{http.StatusTooManyRequests}
	s.notice(t, 2, 2, 0)
	if d := recv(t, s.clock.scheduled, "retry timer"); d != 2*time.Second {
		t.Fatalf("retry scheduled after %v, want the 429's Retry-After of 2s", d)
	}
	if len(s.historyAfter()) != 1 {
		t.Fatalf("history requests %v, want the one refused", s.historyAfter())
	}
	s.clock.fire()
	s.expectSeqs(t, 1, 2)
}

func TestReadFanoutMarkIsKeptSentAndPersisted(t *testing.T) {
	s := startReadSession(t, 0, Options{PullDelayMax: -1})
	if s.fc.mark != "7" {
		t.Fatalf("first connection's mark=%q, want the snapshot's 7", s.fc.mark)
	}
	if got := s.c.Mark(); got != 7 {
		t.Fatalf("Mark() = %d, want 7", got)
	}
	s.f.addGroupMessages("g1", 3)
	// A slow pull: Mark stays at 7 until the messages the changes frame announced are in.
	s.f.historyFail = []int{http.StatusServiceUnavailable}
	s.pushJSON(t, map[string]any{"op": "changes", "mark": 9, "conversations": []ConversationBrief{groupBrief(3, 3)}})
	recv(t, s.clock.scheduled, "retry timer")
	if got := s.c.Mark(); got != 7 {
		t.Fatalf("Mark() = %d while announced messages are missing, want 7", got)
	}
	s.clock.fire()
	s.expectSeqs(t, 1, 2, 3)
	if got := s.c.Mark(); got != 9 { // advanced before the last message was handed over
		t.Fatalf("Mark() = %d after the pull, want 9", got)
	}
	if got := s.c.Seqs()["g1"]; got != 3 {
		t.Errorf("Seqs()[g1] = %d, want 3", got)
	}

	// The same brief again (a reconnect's changes frame from an older mark) changes nothing.
	s.pushJSON(t, map[string]any{"op": "changes", "mark": 9, "conversations": []ConversationBrief{groupBrief(3, 3), groupBrief(1, 1)}})

	// A reconnect sends the latest mark, and so does an HTTP sync.
	s.fc.closeWith(websocket.CloseGoingAway)
	fc2 := recv(t, s.f.conns, "second connection")
	if fc2.mark != "9" {
		t.Fatalf("reconnected with mark=%q, want 9", fc2.mark)
	}
	s.f.setLog(2)
	fc2.push(s.f.event(2)) // a gap: filled over HTTP
	expectCursors(t, s.evs, 1, 2)
	s.f.mu.Lock()
	marks := slices.Clone(s.f.syncMarks)
	s.f.mu.Unlock()
	if len(marks) == 0 || marks[0] != "9" {
		t.Errorf("HTTP sync marks %v, want mark=9", marks)
	}
	s.stop(t)

	// A new session given the persisted values resumes from them.
	f := newFake(t)
	c := f.client(t, Options{Cursor: 2, Mark: s.c.Mark(), Seqs: s.c.Seqs()})
	if err := c.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fc := recv(t, f.conns, "resumed connection"); fc.mark != "9" || fc.cursor != 2 {
		t.Errorf("resumed with cursor %d mark=%q, want 2 and 9", fc.cursor, fc.mark)
	}
	if got := c.Seqs()["g1"]; got != 3 {
		t.Errorf("resumed Seqs()[g1] = %d, want 3", got)
	}
}

func TestReadFanoutUnreadFollowsOwnReads(t *testing.T) {
	s := startReadSession(t, 0, Options{})
	s.notice(t, 4, 4, 5000)
	s.awaitBrief(t, "unread 4", func(b ConversationBrief) bool { return b.Unread == 4 })
	// Another device of this user read up to 3: the read event moves the floor here too.
	s.f.mu.Lock()
	data, _ := json.Marshal(ReadData{UserID: "alice", ReadSeq: 3})
	s.f.log = append(s.f.log, SyncEvent{Cursor: 1, Type: EventRead, ConvID: "g1", Data: data})
	s.f.mu.Unlock()
	s.fc.push(s.f.event(1))
	b := s.awaitBrief(t, "unread after read", func(b ConversationBrief) bool { return b.ReadSeq == 3 })
	if b.Unread != 1 {
		t.Errorf("unread %d after reading 3 of 4, want 1", b.Unread)
	}
	// A later notice's count is the server's, even where this device's own arithmetic
	// would differ (a read on another device whose event has not arrived yet).
	s.notice(t, 6, 1, 5000)
	if b := s.awaitBrief(t, "unread after notice", func(b ConversationBrief) bool { return b.MaxSeq == 6 }); b.Unread != 1 {
		t.Errorf("unread %d after the notice, want its 1", b.Unread)
	}
	if b, ok := s.c.ReadFanoutConversation("g1"); !ok || b.Unread != 1 {
		t.Errorf("ReadFanoutConversation = %+v, %v; want unread 1", b, ok)
	}
}

func TestReadFanoutReopensAfterReconnectAndPassesReceipts(t *testing.T) {
	s := startReadSession(t, 0, Options{})
	s.f.briefs["g1"] = groupBrief(0, 0)
	if _, err := s.c.OpenConversation(testCtx(t), "g1"); err != nil {
		t.Fatal(err)
	}
	if fr := recv(t, s.fc.frames, "open frame"); fr["op"] != "open" || fr["conv_id"] != "g1" {
		t.Fatalf("frame %v, want open g1", fr)
	}
	s.fc.ws.Close()
	fc2 := recv(t, s.f.conns, "second connection")
	if fr := recv(t, fc2.frames, "reopen frame"); fr["op"] != "open" || fr["conv_id"] != "g1" {
		t.Fatalf("frame %v after reconnect, want open g1", fr)
	}
	if err := s.c.CloseConversation(testCtx(t), "g1"); err != nil {
		t.Fatal(err)
	}
	if fr := recv(t, fc2.frames, "close frame"); fr["op"] != "close" {
		t.Fatalf("frame %v, want close", fr)
	}

	fc2.write(map[string]any{"op": "receipts", "conv_id": "g1", "receipts": []Receipts{{Seq: 4, MemberCount: 200, ReadCount: 128, DeliveredCount: 190}}})
	rs := recv(t, s.receipts, "receipts")
	if len(rs) != 1 || rs[0].Seq != 4 || rs[0].ReadCount != 128 || rs[0].MemberCount != 200 {
		t.Errorf("receipts %+v, want seq 4 read by 128 of 200", rs)
	}
}

// TestReadFanoutMentionPastAGapWaitsForTheMessagesBelow: a mention puts a read-fanout
// message in the user's log (protocol.md section 10); its event may arrive before the room's
// push of the message below it. The message below is fetched and handed over first.
func TestReadFanoutMentionPastAGapWaitsForTheMessagesBelow(t *testing.T) {
	s := startReadSession(t, 0, Options{})
	s.f.addGroupMessages("g1", 2)
	s.f.briefs["g1"] = groupBrief(2, 2)
	if _, err := s.c.OpenConversation(testCtx(t), "g1"); err != nil {
		t.Fatal(err)
	}
	s.expectSeqs(t, 1, 2)
	s.f.addGroupMessages("g1", 4)
	s.pushJSON(t, map[string]any{"op": "event", "event": map[string]any{
		"cursor": 1, "type": "message", "conv_id": "g1", "ts": 1, "data": groupMsg("g1", 4, "bob")}})
	s.expectSeqs(t, 3, 4)
	s.pushMessage(t, 3) // the room's push, late: a repeat
	s.pushMessage(t, 4)
	s.stop(t)
}
