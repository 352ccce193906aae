package e2e

import (
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/server"
)

// dialMark opens a WebSocket with ?cursor= (when >= 0) and ?mark=.
func (n *node) dialMark(t testing.TB, token string, cursor, mark int64) *wsClient {
	t.Helper()
	q := url.Values{"mark": {strconv.FormatInt(mark, 10)}}
	if cursor >= 0 {
		q.Set("cursor", strconv.FormatInt(cursor, 10))
	}
	return n.dialQuery(t, token, q)
}

// pushOf waits for the next push with op, skipping events (and, with skip, other pushes).
func (c *wsClient) pushOf(op string) map[string]any {
	c.t.Helper()
	for {
		p := c.push()
		if p["op"] == op {
			return p
		}
		if p["op"] != "event" {
			c.t.Fatalf("push %s, want %q", show(p), op)
		}
	}
}

// noticeUntil collects c's notices of convID until one reaches maxSeq, with the time each
// arrived, and fails on any message push meanwhile.
func (c *wsClient) noticeUntil(convID string, maxSeq int64) (notices []map[string]any, at []time.Time) {
	c.t.Helper()
	for {
		p := c.pushOf("notice")
		if p["conv_id"] != convID {
			continue
		}
		wantKeys(c.t, "notice", p, "op", "conv_id", "max_seq", "unread", "pull_delay_ms")
		if d := num(p["pull_delay_ms"]); d < 0 || d > 3000 {
			c.t.Fatalf("pull delay %d ms, want 0-3000", d)
		}
		notices, at = append(notices, p), append(at, time.Now())
		if num(p["max_seq"]) >= maxSeq {
			return notices, at
		}
	}
}

// TestReadFanoutLive: in a read-fanout group, a connection that opened the conversation
// gets every message pushed in full, once, in seq order (sends from several goroutines at
// once); another online member gets coalesced notices, at most one a second, with its
// unread count and a pull delay, never the body; an offline member catches up by the
// "changes" push of a connection made with a mark.
func TestReadFanoutLive(t *testing.T) {
	n := start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.ConvCreateEvery = 0
	})
	alice, bob, carol, dave := n.user(t, "alice"), n.user(t, "bob"), n.user(t, "carol"), n.user(t, "dave")
	g := n.group(t, alice, "all hands", false, "bob", "carol", "dave")
	convID := g["conv_id"].(string)
	if g["fanout"] != "read" {
		t.Fatalf("group of 4 with --write-fanout-max 2: %s", show(g))
	}

	bobWS := n.dialMark(t, bob, 0, 0)
	ch := bobWS.pushOf("changes")
	wantKeys(t, "changes", ch, "op", "mark", "conversations")
	opened := bobWS.do("open", map[string]any{"conv_id": convID})
	if num(opened["code"]) != 0 || opened["conv_id"] != convID || opened["fanout"] != "read" || num(opened["max_seq"]) != 0 {
		t.Fatalf("open: %s", show(opened))
	}
	carolWS := n.dial(t, carol, -1)

	const total = 100
	// carol's notices are read as they arrive, so that their times are the arrivals'.
	type noticed struct {
		notices []map[string]any
		at      []time.Time
	}
	carolGot := make(chan noticed, 1)
	go func() {
		ns, at := carolWS.noticeUntil(convID, total)
		carolGot <- noticed{ns, at}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += 4 {
				if r := n.call(t, "POST", "/v1/messages", alice, textMessage(convID, fmt.Sprintf("m-%03d", i))); r.status != 200 {
					t.Errorf("send %d: %d %s", i, r.status, r.raw)
				}
			}
		}()
	}
	wg.Wait()

	for seq := int64(1); seq <= total; seq++ {
		p := bobWS.pushOf("message")
		wantKeys(t, "message push", p, "op", "message")
		m := obj(t, p["message"])
		if num(m["seq"]) != seq || m["conv_id"] != convID || m["sender_id"] != "alice" {
			t.Fatalf("push %d: %s, want seq %d", seq, show(m), seq)
		}
	}

	var got noticed
	select {
	case got = <-carolGot:
	case <-time.After(deadline):
		t.Fatal("carol's notices did not reach max_seq in time")
	}
	notices, at := got.notices, got.at
	for _, p := range notices {
		if p["content"] != nil || p["message"] != nil || num(p["unread"]) != num(p["max_seq"]) {
			t.Fatalf("notice %s: want no body and every message unread", show(p))
		}
	}
	// At most one a second: the notices from the i-th to the j-th span at least j-i seconds
	// as the node sends them. They are timed as they arrive, which a busy machine delays
	// unevenly (one read 300 ms late and the next on time are 700 ms apart), so one in every
	// span may be extra: a node that notified more often is still caught over a few.
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			if span := at[j].Sub(at[i]); j-i > int(span/time.Second)+1 {
				t.Fatalf("notices %d to %d arrived within %v, for a burst of %d messages: want at most one a second", i, j, span, total)
			}
		}
	}

	// carol reads half; the next notice counts from there.
	if r := carolWS.do("read", map[string]any{"conv_id": convID, "seq": 50}); num(r["read_seq"]) != 50 {
		t.Fatalf("read: %s", show(r))
	}
	carolWS.pushOf("event") // her read event
	n.send(t, alice, convID, "m-after-read")
	notices, _ = carolWS.noticeUntil(convID, total+1)
	if last := notices[len(notices)-1]; num(last["unread"]) != total+1-50 {
		t.Fatalf("notice after reading 50: %s, want unread %d", show(last), total+1-50)
	}

	if p := bobWS.pushOf("message"); num(obj(t, p["message"])["seq"]) != total+1 {
		t.Fatalf("bob's push after carol's read: %s", show(p))
	}
	// bob closes the conversation: notices instead of pushes.
	if r := bobWS.do("close", map[string]any{"conv_id": convID}); num(r["code"]) != 0 {
		t.Fatalf("close: %s", show(r))
	}
	n.send(t, alice, convID, "m-after-close")
	if p := bobWS.pushOf("notice"); p["conv_id"] != convID || num(p["max_seq"]) != total+2 {
		t.Fatalf("after close: %s, want a notice of max_seq %d", show(p), total+2)
	}

	// dave was offline throughout: a connection with his mark from before catches up.
	daveWS := n.dialMark(t, dave, -1, num(ch["mark"]))
	ch = daveWS.pushOf("changes")
	convs := arr(t, ch["conversations"])
	if len(convs) != 1 || convs[0]["conv_id"] != convID || num(convs[0]["max_seq"]) != total+2 || num(convs[0]["unread"]) != total+2 {
		t.Fatalf("dave's changes: %s", show(ch))
	}
	checkBrief(t, "changes brief", convs[0])
	if hist := n.history(t, dave, convID, total); len(hist) != 2 {
		t.Fatalf("dave's history after %d: %d messages", total, len(hist))
	}
}

// TestReadFanoutOpenRules: open answers the caller's brief, for any conversation they are a
// member of; it refuses others as missing, malformed ids, and a 33rd open conversation;
// open and close are idempotent; a mark ahead of the store is refused before the upgrade.
func TestReadFanoutOpenRules(t *testing.T) {
	n := start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.ConvCreateEvery = 0
		c.Gateway.ConvChangeEvery = 0
	})
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.user(t, "carol")
	ws := n.dial(t, bob, -1)
	other := n.group(t, alice, "not bob's", false, "carol")
	r := ws.do("open", map[string]any{"conv_id": other["conv_id"]})
	if num(r["code"]) != 404 {
		t.Fatalf("open of a conversation bob is not in: %s", show(r))
	}
	if r := ws.do("open", map[string]any{"conv_id": "not/an id"}); num(r["code"]) != 400 {
		t.Fatalf("open of a malformed id: %s", show(r))
	}
	var ids []string
	for i := range 32 {
		g := n.group(t, bob, fmt.Sprint("g", i), false, "alice")
		ids = append(ids, g["conv_id"].(string))
		for range 2 { // idempotent
			if r := ws.do("open", map[string]any{"conv_id": ids[i]}); num(r["code"]) != 0 || r["conv_id"] != ids[i] {
				t.Fatalf("open %d: %s", i, show(r))
			}
		}
	}
	extra := n.group(t, bob, "one too many", false, "alice")["conv_id"]
	if r := ws.do("open", map[string]any{"conv_id": extra}); num(r["code"]) != 409 {
		t.Fatalf("33rd open: %s", show(r))
	}
	for range 2 {
		if r := ws.do("close", map[string]any{"conv_id": ids[0]}); num(r["code"]) != 0 {
			t.Fatalf("close: %s", show(r))
		}
	}
	if r := ws.do("open", map[string]any{"conv_id": extra}); num(r["code"]) != 0 {
		t.Fatalf("open after a close: %s", show(r))
	}
	_, resp, err := n.dialRaw(bob, url.Values{"mark": {"99"}})
	if err == nil || resp == nil || resp.StatusCode != 409 {
		t.Fatalf("mark ahead: err %v, resp %v, want HTTP 409", err, resp)
	}
}

// TestReadFanoutSwitchLive: a connection with the conversation open sees every message once
// and in seq order while the group switches to read fanout under concurrent sends: the
// messages before the switch as events of its log, those after as pushes, the first of
// which it gets when it follows the group on pushing the switch's conv_updated event.
func TestReadFanoutSwitchLive(t *testing.T) {
	n := start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 3
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.FanoutRate = 0
		c.Gateway.ConvChangeEvery = 0
	})
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	for _, u := range []string{"carol", "dave", "erin"} {
		n.user(t, u)
	}
	convID := n.group(t, alice, "growing", false, "bob")["conv_id"].(string)
	ws := n.dial(t, bob, n.latest(t, bob))
	if r := ws.do("open", map[string]any{"conv_id": convID}); r["fanout"] != "write" {
		t.Fatalf("open: %s", show(r))
	}
	const total = 60
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range total {
			if r := n.call(t, "POST", "/v1/messages", alice, textMessage(convID, fmt.Sprintf("s-%03d", i))); r.status != 200 {
				t.Errorf("send %d: %d %s", i, r.status, r.raw)
			}
			if i == total/3 {
				close(stop)
			}
		}
	}()
	<-stop
	grown := n.ok(t, "POST", "/v1/conversations/"+convID+"/members", alice, map[string]any{"add": []string{"carol", "dave", "erin"}})
	if grown["fanout"] != "read" {
		t.Fatalf("grown: %s", show(grown))
	}
	wg.Wait()

	switched := false
	for seq := int64(1); seq <= total; {
		p := ws.push()
		switch p["op"] {
		case "event":
			ev := obj(t, p["event"])
			switch ev["type"] {
			case "conv_updated":
				switched = switched || obj(t, ev["data"])["fanout"] == "read"
				continue
			case "message":
				if switched {
					t.Fatalf("a message event after the switch: %s", show(ev))
				}
				if got := num(obj(t, ev["data"])["seq"]); got != seq {
					t.Fatalf("message event seq %d, want %d", got, seq)
				}
			default:
				continue
			}
		case "message":
			if !switched {
				t.Fatalf("a message push before the switch event: %s", show(p))
			}
			got := num(obj(t, p["message"])["seq"])
			if got > seq && cluster() {
				// On several nodes bob's node may start following the group after the
				// switch while earlier messages were on the bus: pushes skip them, and
				// the client fills the gap by history, as the protocol asks (10.1).
				page := n.ok(t, "GET", fmt.Sprintf("/v1/conversations/%s/messages?after_seq=%d&limit=%d", convID, seq-1, got-seq), bob, nil)
				if ms := page["messages"].([]any); int64(len(ms)) != got-seq || num(obj(t, ms[0])["seq"]) != seq {
					t.Fatalf("history of the skipped seqs %d..%d: %s", seq, got-1, show(page))
				}
				seq = got
			}
			if got != seq {
				t.Fatalf("message push seq %d, want %d", got, seq)
			}
		default:
			t.Fatalf("push %s", show(p))
		}
		seq++
	}
	if !switched {
		t.Fatal("bob never saw the switch")
	}
}

// TestReadFanoutOfflineCatchUp: a member offline during 5,000 messages of a read-fanout group
// catches up completely: one sync from its mark reports the group with every message unread,
// without any of them in its log, and history pages bring each message once, in seq order.
func TestReadFanoutOfflineCatchUp(t *testing.T) {
	n := start(t, func(c *server.Config) {
		c.Chat.WriteFanoutMax = 2
		c.Gateway.SendRate = 0
		c.Gateway.RequestRate = 0
		c.Gateway.HistoryRate = 0
	})
	alice, bob := n.user(t, "alice"), n.user(t, "bob")
	n.user(t, "carol")
	convID := n.group(t, alice, "big", false, "bob", "carol")["conv_id"].(string)
	first := n.ok(t, "GET", "/v1/sync?cursor=0&mark=0", bob, nil)
	cursor, mark := num(first["cursor"]), num(first["mark"])

	const total = 5000
	ws := n.dial(t, alice, -1)
	const window = 32 // sends in flight, as the protocol allows
	for sent, acked := 0, 0; acked < total; {
		for sent < total && sent-acked < window {
			ws.write(map[string]any{"id": fmt.Sprint(sent), "op": "send", "conv_id": convID,
				"client_msg_id": fmt.Sprintf("c-%05d", sent), "content_type": 1, "content": map[string]any{"text": fmt.Sprint(sent)}})
			sent++
		}
		if r := ws.reply(); num(r["code"]) != 0 || num(r["seq"]) != int64(acked+1) {
			t.Fatalf("ack %d: %s", acked, show(r))
		}
		acked++
	}

	got := n.ok(t, "GET", fmt.Sprintf("/v1/sync?cursor=%d&mark=%d", cursor, mark), bob, nil)
	if evs := arr(t, got["events"]); len(evs) != 0 {
		t.Fatalf("bob's log has %d events for read-fanout messages", len(evs))
	}
	convs := arr(t, got["conversations"])
	if len(convs) != 1 || num(convs[0]["max_seq"]) != total || num(convs[0]["unread"]) != total {
		t.Fatalf("sync: %s, want the group with %d unread", show(convs), total)
	}
	var last int64
	for last < total {
		page := n.history(t, bob, convID, last)
		if len(page) == 0 {
			t.Fatalf("an empty history page after seq %d", last)
		}
		for _, m := range page {
			if num(m["seq"]) != last+1 || obj(t, m["content"])["text"] != fmt.Sprint(last) {
				t.Fatalf("after seq %d: %s", last, show(m))
			}
			last++
		}
	}
}
