// Package tier is the cold tier of history: it seals a conversation's old messages into
// immutable compressed segments in the blob store, keeps their index and overlay in the
// hot store (store.SegmentReader), and answers every read that names a seq the same for a
// cold message as for a hot one (Store). docs/design.md, "History tiers", has the design
// and the argument that a crash at any step loses and duplicates nothing.
package tier

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/parleychat/parley/internal/store"
)

// A segment's blob is a zstd frame (with its content checksum) of a gob stream: one
// header, then one record per message in seq order. Gob sends no empty slice, so an empty
// Content, Extra or Mentions reads back nil: the store keeps none (an absent or recalled
// field is nil, and content is never empty JSON). Gob describes its types in the stream
// itself, so a later version can add fields that an older reader skips; renaming or
// retyping a field needs a new formatVersion.
const (
	formatName    = "parley-segment"
	formatVersion = 1
)

type header struct {
	Format   string
	Version  int
	ConvID   string
	FirstSeq int64
	LastSeq  int64
	Count    int
}

type record struct {
	Seq          int64
	MsgID        string
	ClientMsgID  string
	SenderID     string
	ContentType  int
	Content      []byte
	Extra        []byte
	CreatedAt    int64
	Recalled     bool
	Mentions     []string
	AttachmentID string
}

// errCorrupt: a blob is not the segment its index entry says.
var errCorrupt = errors.New("tier: segment does not match its index entry")

// One encoder and one decoder serve every segment: both are safe for concurrent use through
// EncodeAll and DecodeAll, and building one costs far more than a segment. The encoder's
// level is zstd's fastest: on chat text it costs 40% of the default's CPU for 8% larger
// segments (BenchmarkEncode), and tiering's CPU is taken from the sends beside it.
var (
	encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(true))
	decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<30))
)

// encode returns the blob of the messages ms, a gapless run of one conversation's seqs,
// and the size of the gob stream inside it.
func encode(ms []store.Message) ([]byte, int, error) {
	if len(ms) == 0 {
		return nil, 0, errors.New("tier: empty segment")
	}
	var raw bytes.Buffer
	enc := gob.NewEncoder(&raw)
	h := header{Format: formatName, Version: formatVersion, ConvID: ms[0].ConvID,
		FirstSeq: ms[0].Seq, LastSeq: ms[len(ms)-1].Seq, Count: len(ms)}
	if err := enc.Encode(h); err != nil {
		return nil, 0, err
	}
	for i := range ms {
		m := &ms[i]
		if m.ConvID != h.ConvID || m.Seq != h.FirstSeq+int64(i) {
			return nil, 0, fmt.Errorf("tier: message %s/%d breaks the run from %s/%d", m.ConvID, m.Seq, h.ConvID, h.FirstSeq)
		}
		r := record{Seq: m.Seq, MsgID: m.MsgID, ClientMsgID: m.ClientMsgID, SenderID: m.SenderID,
			ContentType: m.ContentType, Content: m.Content, Extra: m.Extra, CreatedAt: m.CreatedAt,
			Recalled: m.Recalled, Mentions: m.Mentions, AttachmentID: m.AttachmentID}
		if err := enc.Encode(&r); err != nil {
			return nil, 0, err
		}
	}
	return encoder.EncodeAll(raw.Bytes(), nil), raw.Len(), nil
}

// decode returns the messages of blob b, checking them against the index entry seg.
func decode(b []byte, seg store.Segment) ([]store.Message, error) {
	raw, err := decoder.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, seg.Key, err)
	}
	dec := gob.NewDecoder(bytes.NewReader(raw))
	var h header
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: %s: header: %w", errCorrupt, seg.Key, err)
	}
	if h.Format != formatName || h.Version != formatVersion || h.ConvID != seg.ConvID ||
		h.FirstSeq != seg.FirstSeq || h.LastSeq != seg.LastSeq || h.Count != int(seg.LastSeq-seg.FirstSeq+1) {
		return nil, fmt.Errorf("%w: %s holds %+v", errCorrupt, seg.Key, h)
	}
	ms := make([]store.Message, h.Count)
	for i := range ms {
		var r record
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%w: %s: message %d: %w", errCorrupt, seg.Key, i, err)
		}
		if r.Seq != h.FirstSeq+int64(i) {
			return nil, fmt.Errorf("%w: %s: seq %d at %d", errCorrupt, seg.Key, r.Seq, i)
		}
		ms[i] = store.Message{ConvID: h.ConvID, Seq: r.Seq, MsgID: r.MsgID, ClientMsgID: r.ClientMsgID,
			SenderID: r.SenderID, ContentType: r.ContentType, Content: r.Content, Extra: r.Extra,
			CreatedAt: r.CreatedAt, Recalled: r.Recalled, Mentions: r.Mentions, AttachmentID: r.AttachmentID}
	}
	if err := dec.Decode(&record{}); err != io.EOF {
		return nil, fmt.Errorf("%w: %s: more than %d messages", errCorrupt, seg.Key, h.Count)
	}
	return ms, nil
}

// segmentKey names a new segment's blob: "s/", a digest of the conversation id (whose
// characters blob keys do not all allow), the seq range, and a random suffix, so that a
// second attempt at a range never lands on the first one's blob.
func segmentKey(convID string, first, last int64) string {
	d := sha256.Sum256([]byte(convID))
	return fmt.Sprintf("s/%s/%d-%d.%s", hex.EncodeToString(d[:12]), first, last, strings.ToLower(rand.Text()[:10]))
}
