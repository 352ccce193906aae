package tier

import (
	"errors"
	"reflect"
	"testing"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/store"
)

func sampleMessages() []store.Message {
	return []store.Message{
		{ConvID: "c_1", Seq: 7, MsgID: "m_a", ClientMsgID: "k1", SenderID: "alice", ContentType: 1,
			Content: []byte(`{"text": "hi  \u00e9 <b>"}`), Extra: []byte(`{"k":"v"}`), CreatedAt: 1000, Mentions: []string{"bob"}},
		{ConvID: "c_1", Seq: 8, MsgID: "m_b", ClientMsgID: "k2", SenderID: "bob", ContentType: 2, CreatedAt: 1001, Recalled: true, AttachmentID: "at_1"},
		{ConvID: "c_1", Seq: 9, MsgID: "m_c", ClientMsgID: "k3", SenderID: "bob", ContentType: 3,
			Content: []byte{'"', 0xff, 0xfe, '"'}, CreatedAt: 1001, AttachmentID: "at_2"},
	}
}

// TestSegmentRoundTrip: a segment reads back every field exactly, the content's bytes as
// they were (whitespace, escapes and invalid UTF-8 included).
func TestSegmentRoundTrip(t *testing.T) {
	ms := sampleMessages()
	b, raw, err := encode(ms)
	if err != nil {
		t.Fatal(err)
	}
	if raw <= 0 {
		t.Fatalf("raw size %d", raw)
	}
	seg := store.Segment{ConvID: "c_1", FirstSeq: 7, LastSeq: 9, Key: "s/x", Bytes: int64(len(b))}
	got, err := decode(b, seg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ms) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, ms)
	}
}

// TestSegmentRefusesWhatItIsNot: a blob that is not the segment its index entry names, or
// is damaged, is an error, never other messages.
func TestSegmentRefusesWhatItIsNot(t *testing.T) {
	b, _, err := encode(sampleMessages())
	if err != nil {
		t.Fatal(err)
	}
	good := store.Segment{ConvID: "c_1", FirstSeq: 7, LastSeq: 9, Key: "s/x"}
	for name, seg := range map[string]store.Segment{
		"another conversation": {ConvID: "c_2", FirstSeq: 7, LastSeq: 9, Key: "s/x"},
		"another range":        {ConvID: "c_1", FirstSeq: 8, LastSeq: 10, Key: "s/x"},
		"fewer messages":       {ConvID: "c_1", FirstSeq: 7, LastSeq: 8, Key: "s/x"},
	} {
		if _, err := decode(b, seg); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v, want errCorrupt", name, err)
		}
	}
	flipped := append([]byte(nil), b...)
	flipped[len(flipped)/2] ^= 0x40
	if _, err := decode(flipped, good); !errors.Is(err, errCorrupt) {
		t.Errorf("a flipped bit: %v, want errCorrupt", err)
	}
	if _, err := decode(b[:len(b)-3], good); !errors.Is(err, errCorrupt) {
		t.Errorf("a cut blob: %v, want errCorrupt", err)
	}
}

// TestSegmentRefusesABrokenRun: encode takes only a gapless run of one conversation.
func TestSegmentRefusesABrokenRun(t *testing.T) {
	ms := sampleMessages()
	ms[2].Seq = 11
	if _, _, err := encode(ms); err == nil {
		t.Error("a gap in the seqs encoded")
	}
	ms = sampleMessages()
	ms[1].ConvID = "c_2"
	if _, _, err := encode(ms); err == nil {
		t.Error("two conversations encoded in one segment")
	}
	if _, _, err := encode(nil); err == nil {
		t.Error("an empty segment encoded")
	}
}

// TestSegmentKey: keys are valid blob keys, distinct per attempt, for any conversation id.
func TestSegmentKey(t *testing.T) {
	a, b := segmentKey("Conv@X.y-1", 1, 8), segmentKey("Conv@X.y-1", 1, 8)
	if a == b {
		t.Errorf("two attempts got one key %q", a)
	}
	for _, k := range []string{a, b} {
		if err := blob.CheckKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
}
