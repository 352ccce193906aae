package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/protocol"
)

// The large-group scenarios (largegroup, readstorm, broadcast and broadcast's baseline) drive
// bare WebSockets, not SDK sessions: 15,000 SDK sessions would make the generator, rather
// than the server, the thing measured, and the SDK neither speaks the ops of read fanout
// (open, close) nor hands over the pushes these scenarios check (message, notice, receipts).
// Each connection is one socket and one reader goroutine; its frames are those of
// docs/protocol.md section 9 and of issue 9's contract.

// RoomJob is a worker's share of a large-group scenario.
type RoomJob struct {
	Conv    string     `json:"conv"`    // the group (broadcast-naive: a stand-in conv_id)
	Members int        `json:"members"` // the group's size, which notices must carry
	Conns   []RoomConn `json:"conns"`
	ReadSeq int64      `json:"read_seq,omitempty"` // readstorm: the message every reader reads
	Readers int        `json:"readers,omitempty"`  // readstorm: the read count the sender waits for
	Window  int        `json:"window,omitempty"`   // broadcast: messages sent and not yet received by every connection here
	Naive   bool       `json:"naive,omitempty"`    // broadcast-naive: the baseline server, which knows no ops
}

// RoomConn is one connection of a room job and what it does.
type RoomConn struct {
	Account
	Open       bool    `json:"open,omitempty"`        // opens the group: every message is pushed to it in full
	Send       bool    `json:"send,omitempty"`        // sends into the group
	Rate       float64 `json:"rate,omitempty"`        // sends/s into each (0: broadcast's windowed closed loop)
	Quota      int64   `json:"quota,omitempty"`       // messages into the group; 0: until the duration ends
	Direct     string  `json:"direct,omitempty"`      // largegroup: a direct conversation of two users not in the group
	SendDirect bool    `json:"send_direct,omitempty"` // largegroup: sends into Direct at Rate
	Peer       bool    `json:"peer,omitempty"`        // largegroup: the other member of Direct
	Read       bool    `json:"read,omitempty"`        // readstorm: marks ReadSeq read at the start
	Receipts   bool    `json:"receipts,omitempty"`    // readstorm: the sender, waiting for the final count
	Type       bool    `json:"type,omitempty"`        // largegroup: types in the group throughout the load (typing.go)
}

// roomPath is where the bench connects: Parley's WebSocket, or the baseline's broadcast.
func (j *RoomJob) path() string {
	if j.Naive {
		return broadcastPath
	}
	return "/v1/ws"
}

// noticeConn says whether c is a member that is online without the group open, which gets
// notices instead of messages.
func (c RoomConn) noticeConn() bool { return !c.Open && c.Direct == "" }

// roomFrame is any frame a room connection reads: a reply (ID set) or a push (op message,
// notice, receipts, event, changes, error). Every field of every kind is here: the kinds
// share no field name with different meanings.
type roomFrame struct {
	ID    *string `json:"id"`
	Op    string  `json:"op"`
	Code  int     `json:"code"`
	Error string  `json:"error"`

	Message *protocol.Message   `json:"message"`
	Event   *protocol.SyncEvent `json:"event"`

	ConvID       string              `json:"conv_id"`
	MaxSeq       int64               `json:"max_seq"`
	Unread       int64               `json:"unread"`
	MembersCount *int                `json:"members_count"` // in notices, per issue 9's contract; absent in the first server
	PullDelayMS  int64               `json:"pull_delay_ms"`
	Fanout       string              `json:"fanout"`
	Receipts     []protocol.Receipts `json:"receipts"`

	Seq       int64  `json:"seq"`
	MsgID     string `json:"msg_id"`
	Duplicate bool   `json:"duplicate"`
	ReadSeq   int64  `json:"read_seq"`
}

// roomConn is one bare WebSocket of a room job.
type roomConn struct {
	l      *roomLoad
	spec   RoomConn
	label  string
	ws     *websocket.Conn
	stream *Stream // messages of the conversations it watches (the group if open, Direct)
	ids    atomic.Uint64
	done   chan struct{} // closed when the reader ends

	writeMu sync.Mutex // one data-frame writer at a time

	mu        sync.Mutex // guards the fields below
	pending   map[string]chan *roomFrame
	notices   []noticeAt
	receipts  []time.Time    // when each receipts push of the group arrived
	counts    map[int64]int  // seq -> highest read_count pushed
	final     chan struct{}  // closed when the final read count arrived
	finalSeen bool           // final is closed
	covered   int64          // highest max_seq noticed
	wantSeq   int64          // drain: the max_seq the notices must reach
	reached   chan struct{}  // drain: closed once covered >= wantSeq
	sentSeqs  map[int64]bool // naive: seqs this connection sent, awaiting their copy
	typing    []time.Time    // when each typing push of the group arrived
}

// roomLoad is the worker side of the large-group scenarios.
type roomLoad struct {
	w      *worker
	job    *RoomJob
	dialer *websocket.Dialer
	conns  []*roomConn

	closing atomic.Bool
	readers sync.WaitGroup

	timesMu sync.Mutex // guards times
	times   map[string][]SentAt

	tracker *deliveryTracker // broadcast: messages every open connection here received

	naiveSeq atomic.Int64 // broadcast-naive: the seqs the sender assigns itself
}

func newRoomLoad(w *worker) *roomLoad {
	return &roomLoad{
		w: w, job: w.job.Room,
		dialer: &websocket.Dialer{
			HandshakeTimeout: 30 * time.Second,
			ReadBufferSize:   4096, WriteBufferSize: 1024,
			NetDialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		},
		times: map[string][]SentAt{},
	}
}

// prepare connects every connection, then opens the group on those that open it, before
// the load starts: the load measures a steady state, not the opening.
func (l *roomLoad) prepare(ctx context.Context) error {
	l.conns = make([]*roomConn, len(l.job.Conns))
	open := 0
	for i, spec := range l.job.Conns {
		c := &roomConn{
			l: l, spec: spec, label: spec.User + "/" + spec.Device,
			pending: map[string]chan *roomFrame{}, counts: map[int64]int{},
			final: make(chan struct{}), done: make(chan struct{}), sentSeqs: map[int64]bool{},
		}
		c.stream = NewStream(l.w.v, spec.User, c.label)
		if spec.Open {
			c.stream.Watch(l.job.Conv, 0)
			l.w.ledger.Watch(l.job.Conv, 0)
			open++
		}
		if spec.Direct != "" {
			c.stream.Watch(spec.Direct, 0)
			l.w.ledger.Watch(spec.Direct, 0)
		}
		l.conns[i] = c
	}
	if l.job.Window > 0 {
		l.tracker = newDeliveryTracker(open)
	}
	err := parallel(ctx, len(l.conns), 64, func(i int) error { return l.conns[i].dial(ctx) })
	if err != nil {
		return err
	}
	if l.job.Naive {
		return nil
	}
	return parallel(ctx, len(l.conns), 64, func(i int) error {
		c := l.conns[i]
		if !c.spec.Open {
			return nil
		}
		f, err := c.call(ctx, "open", func(b []byte) []byte {
			return appendConvParam(b, l.job.Conv)
		})
		if err != nil {
			return fmt.Errorf("open %s on %s: %w", l.job.Conv, c.label, err)
		}
		if f.Fanout != "read" {
			return fmt.Errorf("open %s: the group is fanout %q, not read: it needs more members than --write-fanout-max", l.job.Conv, f.Fanout)
		}
		return nil
	})
}

// appendConvParam appends `"conv_id":"..."` to b.
func appendConvParam(b []byte, conv string) []byte {
	b = append(b, `"conv_id":`...)
	return protocol.AppendString(b, conv)
}

func (c *roomConn) dial(ctx context.Context) error {
	u := wsBase(c.l.w.job.nodeURL(c.spec.Account)) + c.l.job.path()
	var h http.Header
	if c.spec.Token != "" {
		u += "?token=" + url.QueryEscape(c.spec.Token)
		h = http.Header{"Authorization": {"Bearer " + c.spec.Token}}
	}
	ws, resp, err := c.l.dialer.DialContext(ctx, u, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return fmt.Errorf("connect %s: %s", c.label, resp.Status)
		}
		return fmt.Errorf("connect %s: %w", c.label, err)
	}
	ws.SetReadLimit(protocol.MaxFrameBytes)
	c.ws = ws
	c.l.readers.Go(c.readLoop)
	return nil
}

// readLoop reads frames until the socket ends. gorilla's default ping handler answers the
// server's heartbeat pings, which is all the server needs to keep a quiet connection.
func (c *roomConn) readLoop() {
	defer func() {
		c.mu.Lock()
		for id, ch := range c.pending {
			close(ch)
			delete(c.pending, id)
		}
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			if !c.l.closing.Load() {
				c.l.w.rec.count("dropped", 1)
				c.l.w.v.Reportf(VDropped, c.label, "", "connection closed by the server: %v", err)
			}
			return
		}
		c.handle(data, time.Now())
	}
}

// handle routes one frame read at now.
func (c *roomConn) handle(data []byte, now time.Time) {
	// The two pushes that come by the tens of thousands a second are read without
	// reflection (the generator shares the machine with the server it measures).
	if p, ok := protocol.ReadMessagePush(data); ok {
		c.onMessage(&roomFrame{Op: p.Op, Message: &p.Message}, now)
		return
	}
	if n, ok := protocol.ReadNoticePush(data); ok {
		c.onNotice(&roomFrame{Op: n.Op, ConvID: n.ConvID, MaxSeq: n.MaxSeq, Unread: n.Unread, PullDelayMS: n.PullDelayMS}, now)
		return
	}
	var f roomFrame
	if err := json.Unmarshal(data, &f); err != nil {
		c.l.w.v.Reportf(VMismatch, c.label, "", "unreadable frame: %v", err)
		return
	}
	if f.ID != nil {
		c.mu.Lock()
		ch := c.pending[*f.ID]
		delete(c.pending, *f.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- &f
		}
		return
	}
	switch f.Op {
	case "message":
		c.onMessage(&f, now)
	case "notice":
		c.onNotice(&f, now)
	case "receipts":
		c.onReceipts(&f, now)
	case protocol.OpTyping:
		if f.ConvID == c.l.job.Conv {
			c.mu.Lock()
			c.typing = append(c.typing, now)
			c.mu.Unlock()
		}
	case protocol.OpEvent:
		if f.Event != nil {
			c.onEvent(*f.Event, now)
		}
	case protocol.OpError:
		c.l.w.v.Reportf(VDropped, c.label, "", "server error push %d: %s", f.Code, f.Error)
	}
}

func (c *roomConn) onMessage(f *roomFrame, now time.Time) {
	w := c.l.w
	if f.Message == nil {
		w.v.Reportf(VMismatch, c.label, "", "message push without a message")
		return
	}
	m := *f.Message
	if !c.spec.Open || m.ConvID != c.l.job.Conv {
		w.v.Reportf(VUnexpected, c.label, m.ConvID, "message seq %d pushed to a connection without the conversation open", m.Seq)
		return
	}
	if _, ok := c.stream.Push(m); !ok {
		return
	}
	if c.l.tracker != nil {
		c.l.tracker.got(c, m.Seq)
	}
	c.received(m, now, "push")
}

// received records message m, new on this connection at now: an echo of its own, a
// delivery otherwise, with its send-to-receive latency in kind's distribution as well.
func (c *roomConn) received(m protocol.Message, now time.Time, kind string) {
	w := c.l.w
	if m.SenderID == c.spec.User {
		w.rec.echo()
		if c.l.job.Naive {
			c.l.naiveAck(c, m, now)
		}
		return
	}
	lat := time.Duration(-1)
	if t, ok := sentAt(m.Content); ok {
		lat = max(now.Sub(t), 0)
		w.rec.latency(kind, lat)
	}
	w.rec.deliver(now, lat)
}

func (c *roomConn) onEvent(ev protocol.SyncEvent, now time.Time) {
	m, ok := c.stream.Event(ev)
	if !ok {
		return
	}
	if m.ConvID == c.l.job.Conv {
		c.l.w.v.Reportf(VUnexpected, c.label, m.ConvID, "message seq %d of the read-fanout group came as an event", m.Seq)
	}
	c.received(m, now, "direct_delivery")
}

func (c *roomConn) onNotice(f *roomFrame, now time.Time) {
	w := c.l.w
	if f.ConvID != c.l.job.Conv {
		return // another conversation of the member's: not this run's
	}
	if !c.spec.noticeConn() {
		w.v.Reportf(VUnexpected, c.label, f.ConvID, "notice (max_seq %d) to a connection with the conversation open", f.MaxSeq)
		return
	}
	if f.MembersCount == nil {
		// The contract's example carries members_count; the server's first notices do
		// not. Counted, not held against it: the issue asks for conv_id, max_seq and unread.
		w.rec.count("notices_without_members_count", 1)
	}
	if (f.MembersCount != nil && *f.MembersCount != c.l.job.Members) || f.PullDelayMS < 0 || f.Unread < 0 || f.Unread > f.MaxSeq {
		w.v.Reportf(VNotice, c.label, f.ConvID, "notice max_seq %d unread %d members_count %v (want %d) pull_delay_ms %d",
			f.MaxSeq, f.Unread, f.MembersCount, c.l.job.Members, f.PullDelayMS)
	}
	if f.Message != nil {
		w.v.Reportf(VUnexpected, c.label, f.ConvID, "notice carries a message body")
	}
	w.rec.raise("notice_pull_delay_max_ms", f.PullDelayMS)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notices = append(c.notices, noticeAt{maxSeq: f.MaxSeq, at: now})
	if f.MaxSeq > c.covered {
		c.covered = f.MaxSeq
		if c.reached != nil && c.covered >= c.wantSeq {
			close(c.reached)
			c.reached = nil
		}
	}
}

func (c *roomConn) onReceipts(f *roomFrame, now time.Time) {
	w := c.l.w
	if f.ConvID != c.l.job.Conv {
		return
	}
	w.rec.count("receipts_pushes", 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.receipts = append(c.receipts, now)
	if len(f.Receipts) > 20 {
		w.v.Reportf(VNotice, c.label, f.ConvID, "receipts push with %d entries (at most 20)", len(f.Receipts))
	}
	for _, r := range f.Receipts {
		if prev, ok := c.counts[r.Seq]; ok && r.ReadCount < prev {
			w.v.Reportf(VReadBackwards, c.label, f.ConvID, "read_count of seq %d went from %d to %d", r.Seq, prev, r.ReadCount)
		}
		if r.ReadCount > r.MemberCount {
			w.v.Reportf(VNotice, c.label, f.ConvID, "read_count %d above member_count %d (seq %d)", r.ReadCount, r.MemberCount, r.Seq)
		}
		c.counts[r.Seq] = max(c.counts[r.Seq], r.ReadCount)
		if r.Seq == c.l.job.ReadSeq && c.spec.Receipts && r.ReadCount >= c.l.job.Readers && !c.finalSeen {
			c.finalSeen = true
			w.rec.raise("receipts_final_unix_ns", now.UnixNano())
			w.rec.raise("receipts_final_count", int64(r.ReadCount))
			close(c.final)
		}
	}
}

// write writes one text frame.
func (c *roomConn) write(frame []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(time.Minute))
	return c.ws.WriteMessage(websocket.TextMessage, frame)
}

// call writes a frame of op with the params params appends (none if nil) and waits for
// its reply; a reply with a code other than 0 is an error.
func (c *roomConn) call(ctx context.Context, op string, params func([]byte) []byte) (*roomFrame, error) {
	id := "r" + strconv.FormatUint(c.ids.Add(1), 36)
	var p []byte
	if params != nil {
		p = append(params(append(make([]byte, 0, 256), '{')), '}')
	}
	ch := make(chan *roomFrame, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(protocol.AppendFrame(nil, id, op, p)); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, err
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return nil, errors.New("connection lost")
		}
		if f.Code != 0 {
			return f, &client.Error{Code: f.Code, Message: f.Error}
		}
		return f, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (l *roomLoad) run(ctx context.Context, at time.Time, stop <-chan struct{}) {
	lctx, cancel := l.w.loadContext(ctx, at, stop)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range l.conns {
		switch {
		case c.spec.Send && l.job.Window > 0:
			wg.Go(func() { l.windowed(lctx, c, at) })
		case c.spec.Send:
			wg.Go(func() { l.openLoop(lctx, c, l.job.Conv, c.spec.Quota, at, 0) })
		case c.spec.SendDirect:
			// On the group senders' schedule, half an interval later, and on a connection
			// of its own: replies come in frame order, so on the group sender's connection
			// each latency would carry the other's.
			wg.Go(func() { l.openLoop(lctx, c, c.spec.Direct, c.spec.Quota, at, 0.5) })
		case c.spec.Read:
			wg.Go(func() { l.read(ctx, c) })
		case c.spec.Type:
			wg.Go(func() { l.typeLoop(lctx, c, at) })
		case c.spec.Receipts:
			wg.Go(func() {
				select {
				case <-c.final:
				case <-lctx.Done():
				}
			})
		}
	}
	wg.Wait()
}

// openLoop sends into conv at the connection's rate on a fixed schedule, whatever the acks
// do; latency counts from the scheduled time. phase shifts the schedule by that fraction of
// an interval.
func (l *roomLoad) openLoop(ctx context.Context, c *roomConn, conv string, quota int64, at time.Time, phase float64) {
	interval := time.Duration(float64(time.Second) / c.spec.Rate)
	first := at.Add(time.Duration(rand.Int64N(int64(max(interval/4, 1)))) + time.Duration(phase*float64(interval)))
	paced(ctx, interval, first, quota, func(intended time.Time) { l.send(ctx, c, conv, intended) })
}

// windowed is broadcast's sender: a closed loop that keeps at most Window messages sent
// and not yet received by every open connection of this worker, so that the server is
// driven at the rate it delivers, not the rate it acknowledges. The baseline runs the same
// loop, so both are paced alike.
func (l *roomLoad) windowed(ctx context.Context, c *roomConn, at time.Time) {
	window := int64(l.job.Window)
	var wg sync.WaitGroup
	defer wg.Wait()
	sent := int64(0)
	if l.job.Naive {
		// The baseline's ack is the sender's own copy: wait for the copies of what was
		// sent, as Parley's sender waits for its acks (wg).
		defer func() {
			octx, cancel := opContext(ctx)
			defer cancel()
			l.tracker.wait(octx, sent)
		}()
	}
	for n := int64(1); c.spec.Quota == 0 || n <= c.spec.Quota; n++ {
		if !l.tracker.wait(ctx, n-window) {
			return
		}
		now := time.Now()
		if l.job.Naive {
			if !l.naiveSend(ctx, c, now) {
				return
			}
			sent = n
			continue
		}
		wg.Go(func() { l.send(ctx, c, l.job.Conv, now) })
	}
}

// send sends one message from c into conv and records its ack.
func (l *roomLoad) send(ctx context.Context, c *roomConn, conv string, intended time.Time) {
	octx, cancel := opContext(ctx)
	defer cancel()
	w := l.w
	var b frameBuf
	b.content = w.appendContent(b.content[:0], intended)
	req := protocol.SendRequest{ConvID: conv, ClientMsgID: client.NewClientMsgID(), ContentType: client.ContentText, Content: b.content}
	f, err := c.call(octx, protocol.OpSend, func(p []byte) []byte {
		body := protocol.AppendSendRequest(nil, &req)
		return append(p, body[1:len(body)-1]...) // the request's fields, flat beside id and op
	})
	now := time.Now()
	if err != nil {
		w.rec.fail(err)
		return
	}
	if conv == l.job.Conv {
		w.rec.op(now, now.Sub(intended))
		l.timesMu.Lock()
		l.times[conv] = append(l.times[conv], SentAt{Seq: f.Seq, At: intended.UnixNano()})
		l.timesMu.Unlock()
	} else {
		w.rec.latency("direct_ack", now.Sub(intended))
	}
	w.rec.ack(now)
	w.ledger.Ack(c.spec.User, client.MessageAck{ConvID: conv, Seq: f.Seq, MsgID: f.MsgID, Duplicate: f.Duplicate})
}

// read marks the storm's message read on c's WebSocket.
func (l *roomLoad) read(ctx context.Context, c *roomConn) {
	octx, cancel := opContext(ctx)
	defer cancel()
	w := l.w
	seq := l.job.ReadSeq
	t0 := time.Now()
	f, err := c.call(octx, protocol.OpRead, func(p []byte) []byte {
		p = appendConvParam(p, l.job.Conv)
		p = append(p, `,"seq":`...)
		return strconv.AppendInt(p, seq, 10)
	})
	now := time.Now()
	if err != nil {
		w.rec.fail(err)
		return
	}
	w.rec.op(now, now.Sub(t0))
	w.rec.raise("last_read_unix_ns", now.UnixNano())
	w.pos.Reply(l.job.Conv, c.spec.User, seq, f.ReadSeq)
}

// drain waits until every open connection holds the targets and every notice connection
// was told of the last message (or the drain timeout), measures the notices, then closes
// every connection.
func (l *roomLoad) drain(ctx context.Context, targets map[string]int64, _ time.Duration) {
	if targets != nil {
		deadline := time.NewTimer(l.w.job.DrainTimeout)
		defer deadline.Stop()
		l.waitStreams(ctx, targets, deadline.C)
		if t := targets[l.job.Conv]; t > 0 {
			l.waitNotices(ctx, t, deadline.C)
		}
		l.measureNotices()
		l.measureTyping()
	}
	l.closing.Store(true)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	for _, c := range l.conns {
		if c.ws != nil {
			_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			c.ws.Close()
		}
	}
	l.readers.Wait()
}

func (l *roomLoad) waitStreams(ctx context.Context, targets map[string]int64, deadline <-chan time.Time) {
	for _, c := range l.conns {
		for {
			ok, ch := c.stream.Caught(targets)
			if ok {
				break
			}
			select {
			case <-ch:
				continue
			case <-deadline:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

func (l *roomLoad) waitNotices(ctx context.Context, maxSeq int64, deadline <-chan time.Time) {
	for _, c := range l.conns {
		if !c.spec.noticeConn() {
			continue
		}
		c.mu.Lock()
		if c.covered >= maxSeq {
			c.mu.Unlock()
			continue
		}
		ch := make(chan struct{})
		c.wantSeq, c.reached = maxSeq, ch
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.done:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// noticeDeadline is how soon a notice must follow a message (issue 9: every online member
// notified within 1.5 s).
const noticeDeadline = 1500 * time.Millisecond

// measureNotices measures every notice connection's notices against the send times the
// coordinator handed over, and the sender's receipts pushes against the same rate rule.
func (l *roomLoad) measureNotices() {
	w := l.w
	sent := sortedTimes(w.times, l.job.Conv)
	for _, c := range l.conns {
		c.mu.Lock()
		ns := append([]noticeAt(nil), c.notices...)
		receipts := append([]time.Time(nil), c.receipts...)
		c.mu.Unlock()
		if len(receipts) >= 2 && !withinRate(len(receipts), receipts[len(receipts)-1].Sub(receipts[0])) {
			w.v.Reportf(VNoticeRate, c.label, l.job.Conv, "%d receipts pushes in %v", len(receipts), receipts[len(receipts)-1].Sub(receipts[0]))
		}
		if !c.spec.noticeConn() || len(sent) == 0 {
			continue
		}
		f := analyseNotices(ns, sent)
		w.rec.count("notices", int64(len(ns)))
		w.rec.count("notice_expected", int64(len(sent)))
		w.rec.count("notice_missed", int64(f.missed))
		for _, d := range f.latencies {
			w.rec.latency("notice", d)
			if d <= noticeDeadline {
				w.rec.count("notice_within_1500ms", 1)
			}
		}
		for _, g := range f.gaps {
			w.rec.latency("notice_gap", g)
		}
		if f.rate > 0 {
			w.rec.value("notice_rate_milli", int64(f.rate*1000))
			w.rec.raise("notice_rate_max_milli", int64(f.rate*1000))
		}
		if f.tooMany {
			w.v.Reportf(VNoticeRate, c.label, l.job.Conv, "%d notices in %v", len(ns), ns[len(ns)-1].at.Sub(ns[0].at))
		}
		if f.missed > 0 {
			w.v.Reportf(VMissing, c.label, l.job.Conv, "no notice covered the last %d messages (notified up to seq %d)", f.missed, maxNoticed(ns))
		}
	}
}

func maxNoticed(ns []noticeAt) int64 {
	var m int64
	for _, n := range ns {
		m = max(m, n.maxSeq)
	}
	return m
}

// recvSummaries returns what the connections received, for the coordinator's Check.
func (l *roomLoad) recvSummaries() []RecvSummary {
	var out []RecvSummary
	for _, c := range l.conns {
		out = append(out, c.stream.Summaries()...)
	}
	return out
}

// sentTimes returns the send times of the acked messages of the group.
func (l *roomLoad) sentTimes() map[string][]SentAt {
	l.timesMu.Lock()
	defer l.timesMu.Unlock()
	out := make(map[string][]SentAt, len(l.times))
	for k, v := range l.times {
		out[k] = append([]SentAt(nil), v...)
	}
	return out
}

// deliveryTracker counts, for each seq, the open connections of this worker that received
// it, and wakes the windowed sender as the seqs every one of them holds advance.
type deliveryTracker struct {
	n int // connections counted

	mu     sync.Mutex // guards the fields below
	counts map[int64]int
	last   map[*roomConn]int64 // per connection, the highest seq counted
	full   int64               // every seq up to this one reached every connection
	wake   chan struct{}       // closed when full advances
}

func newDeliveryTracker(n int) *deliveryTracker {
	return &deliveryTracker{n: n, counts: map[int64]int{}, last: map[*roomConn]int64{}, wake: make(chan struct{})}
}

// got records that c received seq; the seqs it skipped count as received (they are
// violations of their own), so that a lost message cannot stall the sender.
func (t *deliveryTracker) got(c *roomConn, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := t.last[c] + 1; s <= seq; s++ {
		t.counts[s]++
	}
	t.last[c] = max(t.last[c], seq)
	advanced := false
	for t.counts[t.full+1] >= t.n {
		delete(t.counts, t.full+1)
		t.full++
		advanced = true
	}
	if advanced {
		close(t.wake)
		t.wake = make(chan struct{})
	}
}

// wait waits until every connection holds seq (true at once for seq <= 0), or ctx ends.
func (t *deliveryTracker) wait(ctx context.Context, seq int64) bool {
	for {
		t.mu.Lock()
		full, wake := t.full, t.wake
		t.mu.Unlock()
		if full >= seq {
			return ctx.Err() == nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// naiveSend writes the next message of the baseline: the very push frame Parley writes for
// a message of an open conversation, with the seq the sender assigns itself, for the
// broadcast server to copy to every connection (the sender's own included).
func (l *roomLoad) naiveSend(_ context.Context, c *roomConn, now time.Time) bool {
	w := l.w
	seq := l.naiveSeq.Add(1)
	m := protocol.Message{
		ConvID: l.job.Conv, Seq: seq, MsgID: "m_" + client.NewClientMsgID(), ClientMsgID: client.NewClientMsgID(),
		SenderID: c.spec.User, ContentType: client.ContentText, Content: w.content(now), CreatedAt: now.UnixMilli(),
	}
	frame, err := json.Marshal(struct {
		Op      string            `json:"op"`
		Message *protocol.Message `json:"message"`
	}{"message", &m})
	if err != nil {
		w.rec.fail(err)
		return false
	}
	c.mu.Lock()
	c.sentSeqs[seq] = true
	c.mu.Unlock()
	if err := c.write(frame); err != nil {
		w.rec.fail(err)
		return false
	}
	return true
}

// naiveAck takes the sender's own copy of a baseline message as its ack, as the sender of
// Parley takes the server's.
func (l *roomLoad) naiveAck(c *roomConn, m protocol.Message, now time.Time) {
	w := l.w
	c.mu.Lock()
	mine := c.sentSeqs[m.Seq]
	delete(c.sentSeqs, m.Seq)
	c.mu.Unlock()
	if !mine {
		return
	}
	if t, ok := sentAt(m.Content); ok {
		w.rec.op(now, now.Sub(t))
	}
	w.rec.ack(now)
	w.ledger.Ack(c.spec.User, client.MessageAck{ConvID: m.ConvID, Seq: m.Seq, MsgID: m.MsgID})
}
