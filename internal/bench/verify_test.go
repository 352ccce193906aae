package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/parleychat/parley/client"
)

// msgEvent builds the sync event of message seq in conv with cursor.
func msgEvent(t *testing.T, cursor int64, conv string, seq int64, sender string) client.SyncEvent {
	t.Helper()
	data, err := json.Marshal(client.Message{ConvID: conv, Seq: seq, MsgID: msgID(conv, seq), SenderID: sender, Content: json.RawMessage(`{"t":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	return client.SyncEvent{Cursor: cursor, Type: client.EventMessage, ConvID: conv, Data: data}
}

func readEvent(t *testing.T, cursor int64, conv, user string, seq int64) client.SyncEvent {
	t.Helper()
	data, _ := json.Marshal(client.ReadData{UserID: user, ReadSeq: seq})
	return client.SyncEvent{Cursor: cursor, Type: client.EventRead, ConvID: conv, Data: data}
}

func msgID(conv string, seq int64) string { return fmt.Sprintf("%s-m%d", conv, seq) }

func ack(conv string, seq int64) client.MessageAck {
	return client.MessageAck{ConvID: conv, Seq: seq, MsgID: msgID(conv, seq)}
}

func kinds(v *Verifier) map[string]int64 {
	_, k, _ := v.Summary()
	return k
}

func TestStream(t *testing.T) {
	tests := []struct {
		name   string
		events func(t *testing.T) []client.SyncEvent
		want   map[string]int64 // violations by kind
	}{
		{"in order", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "c", 1, "a"), readEvent(t, 12, "c", "b", 1), msgEvent(t, 13, "c", 2, "a")}
		}, map[string]int64{}},
		{"dropped event", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "c", 1, "a"), msgEvent(t, 13, "c", 3, "a")}
		}, map[string]int64{VCursorGap: 1, VSeqGap: 1}},
		{"repeated event", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "c", 1, "a"), msgEvent(t, 11, "c", 1, "a")}
		}, map[string]int64{VCursorRepeat: 1}},
		{"message twice under new cursors", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "c", 1, "a"), msgEvent(t, 12, "c", 1, "a")}
		}, map[string]int64{VSeqRepeat: 1}},
		{"out of order seqs", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "c", 2, "a"), msgEvent(t, 12, "c", 1, "a")}
		}, map[string]int64{VSeqGap: 1, VSeqRepeat: 1}},
		{"read position backwards", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{readEvent(t, 11, "c", "b", 5), readEvent(t, 12, "c", "b", 4)}
		}, map[string]int64{VReadBackwards: 1}},
		{"other conversation ignored", func(t *testing.T) []client.SyncEvent {
			return []client.SyncEvent{msgEvent(t, 11, "x", 7, "a"), msgEvent(t, 12, "c", 1, "a")}
		}, map[string]int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier()
			s := NewStream(v, "b", "b/d1")
			s.Watch("c", 0)
			s.Reset(10)
			for _, ev := range tc.events(t) {
				s.Event(ev)
			}
			got := kinds(v)
			if len(got) != len(tc.want) {
				t.Fatalf("violations %v, want %v", got, tc.want)
			}
			for k, n := range tc.want {
				if got[k] != n {
					t.Fatalf("violations %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestStreamSecondResetIsViolation(t *testing.T) {
	v := NewVerifier()
	s := NewStream(v, "b", "b/d1")
	s.Reset(3)
	s.Reset(9)
	if kinds(v)[VReset] != 1 {
		t.Fatalf("violations %v, want one reset", kinds(v))
	}
}

func TestCheck(t *testing.T) {
	// Three messages acked in conv c (base 0); two devices received them.
	setup := func(v *Verifier) (*Ledger, *Stream, *Stream) {
		l := NewLedger(v)
		l.Watch("c", 0)
		a := NewStream(v, "a", "a/d1")
		b := NewStream(v, "b", "b/d1")
		for _, s := range []*Stream{a, b} {
			s.Watch("c", 0)
			s.Reset(0)
		}
		return l, a, b
	}
	t.Run("all delivered", func(t *testing.T) {
		v := NewVerifier()
		l, a, b := setup(v)
		for seq := int64(1); seq <= 3; seq++ {
			l.Ack("a", ack("c", seq))
			a.Event(msgEvent(t, seq, "c", seq, "a"))
			b.Event(msgEvent(t, seq, "c", seq, "a"))
		}
		exp := Check(v, l.Summaries(), append(a.Summaries(), b.Summaries()...))
		if v.Count() != 0 || exp != 3 {
			t.Fatalf("violations %v, expected deliveries %d (want 0 and 3: b gets 3, a's own are echoes)", kinds(v), exp)
		}
	})
	t.Run("last message lost", func(t *testing.T) {
		v := NewVerifier()
		l, a, b := setup(v)
		for seq := int64(1); seq <= 3; seq++ {
			l.Ack("a", ack("c", seq))
			a.Event(msgEvent(t, seq, "c", seq, "a"))
			if seq < 3 {
				b.Event(msgEvent(t, seq, "c", seq, "a"))
			}
		}
		Check(v, l.Summaries(), append(a.Summaries(), b.Summaries()...))
		if kinds(v)[VMissing] != 1 || v.Count() != 1 {
			t.Fatalf("violations %v, want one missing", kinds(v))
		}
	})
	t.Run("different message at a seq", func(t *testing.T) {
		v := NewVerifier()
		l, _, b := setup(v)
		l.Ack("a", ack("c", 1))
		ev := msgEvent(t, 1, "c", 1, "a")
		var m client.Message
		_ = json.Unmarshal(ev.Data, &m)
		m.MsgID = "someone-else"
		ev.Data, _ = json.Marshal(m)
		b.Event(ev)
		Check(v, l.Summaries(), b.Summaries())
		if kinds(v)[VMismatch] != 1 {
			t.Fatalf("violations %v, want a mismatch", kinds(v))
		}
	})
	t.Run("seq acked twice", func(t *testing.T) {
		v := NewVerifier()
		l := NewLedger(v)
		l.Watch("c", 0)
		l.Ack("a", ack("c", 1))
		dup := ack("c", 1)
		dup.Duplicate = true
		l.Ack("a", dup) // an SDK retry answered with the original ack: fine
		if v.Count() != 0 {
			t.Fatalf("duplicate ack reported: %v", kinds(v))
		}
		other := ack("c", 1)
		other.MsgID = "another message"
		l.Ack("b", other)
		if kinds(v)[VSeqReused] != 1 {
			t.Fatalf("violations %v, want seq_reused", kinds(v))
		}
	})
	t.Run("seq shared across processes", func(t *testing.T) {
		v := NewVerifier()
		l1, l2 := NewLedger(v), NewLedger(v)
		for _, l := range []*Ledger{l1, l2} {
			l.Watch("c", 0)
		}
		l1.Ack("a", ack("c", 1))
		l2.Ack("b", ack("c", 1))
		Check(v, MergeAcks(l1.Summaries(), l2.Summaries()), nil)
		if kinds(v)[VSeqReused] != 1 {
			t.Fatalf("violations %v, want seq_reused", kinds(v))
		}
	})
	t.Run("unacked extra message is not a violation", func(t *testing.T) {
		v := NewVerifier()
		l, _, b := setup(v)
		l.Ack("a", ack("c", 1))
		b.Event(msgEvent(t, 1, "c", 1, "a"))
		b.Event(msgEvent(t, 2, "c", 2, "a")) // stored, but its send timed out
		Check(v, l.Summaries(), b.Summaries())
		if v.Count() != 0 {
			t.Fatalf("violations %v, want none", kinds(v))
		}
	})
}

func TestPositions(t *testing.T) {
	v := NewVerifier()
	p := NewPositions(v)
	p.Reply("c", "u", 3, 3)
	p.Reply("c", "u", 2, 3) // asking for less returns the position in force
	if v.Count() != 0 {
		t.Fatalf("violations %v", kinds(v))
	}
	p.Reply("c", "u", 4, 2)
	if kinds(v)[VReadBackwards] != 1 {
		t.Fatalf("violations %v, want read_backwards", kinds(v))
	}
}

func TestDigestOrderIndependent(t *testing.T) {
	a := digest(1, "x") ^ digest(2, "y")
	b := digest(2, "y") ^ digest(1, "x")
	if a != b || digest(1, "x") == digest(2, "x") || digest(1, "x") == digest(1, "y") {
		t.Fatal("digest is not a per-message identity")
	}
}

// TestDigestIsFNV1a holds digest's inline hash to hash/fnv, so that its values stay those
// of every earlier version (and of any process of another build a run may merge).
func TestDigestIsFNV1a(t *testing.T) {
	for _, tc := range []struct {
		seq int64
		id  string
	}{{0, ""}, {1, "m_kdjnrolfoqbolrqvkom7cxrgqm"}, {-1, "é\x00"}, {1 << 62, "x"}} {
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(tc.seq))
		h.Write(b[:])
		h.Write([]byte(tc.id))
		x := h.Sum64()
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		if got := digest(tc.seq, tc.id); got != x {
			t.Errorf("digest(%d, %q) = %016x, want %016x", tc.seq, tc.id, got, x)
		}
	}
}

func TestStreamCaught(t *testing.T) {
	v := NewVerifier()
	s := NewStream(v, "b", "b/d1")
	s.Watch("c1", 0)
	s.Watch("c2", 0)
	s.Watch("c3", 5) // has a target it already holds
	s.Resume(1)
	targets := map[string]int64{"c1": 2, "c2": 1, "c3": 5}
	ok, ch := s.Caught(targets)
	if ok || ch == nil {
		t.Fatalf("Caught before any message = %v, %v", ok, ch)
	}
	isClosed := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	events := []client.SyncEvent{
		msgEvent(t, 2, "c1", 1, "a"),
		msgEvent(t, 3, "c2", 1, "a"), // c2 reached; c1 not yet
		msgEvent(t, 4, "c9", 1, "a"), // not watched
		msgEvent(t, 5, "c1", 2, "a"), // c1 reached: all are
	}
	for i, ev := range events {
		if isClosed() {
			t.Fatalf("woken before event %d", i)
		}
		s.Event(ev)
	}
	if !isClosed() {
		t.Fatal("not woken once every target was reached")
	}
	if ok, _ := s.Caught(targets); !ok {
		t.Error("Caught after every target = false")
	}
	if got := kinds(v); len(got) != 0 {
		t.Errorf("violations %v", got)
	}
}
