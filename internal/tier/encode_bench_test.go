package tier

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/store"
)

// benchSegment is 900 messages of about 200 bytes of chat-like text each.
func benchSegment() []store.Message {
	words := strings.Fields(`the a to and of I you it is that in for on me we be this with have just so not are
was what my but do at can if all your get no like going will know up out one about time think good how
now yes see there got back they then when really need today tomorrow meeting call later sure thanks
okay lunch home work office project deadline review please send file did well maybe great sounds plan`)
	rng := rand.New(rand.NewPCG(1, 2))
	ms := make([]store.Message, 900)
	for i := range ms {
		var sb strings.Builder
		sb.WriteString(`{"text":"`)
		for sb.Len() < 200 {
			sb.WriteString(words[rng.IntN(len(words))] + " ")
		}
		sb.WriteString(`"}`)
		ms[i] = store.Message{ConvID: "c_0123456789abcdef", Seq: int64(i + 1), MsgID: fmt.Sprintf("m_%016x", rng.Uint64()),
			ClientMsgID: fmt.Sprintf("c%d", i), SenderID: []string{"alice", "bob"}[i%2], ContentType: 1,
			Content: []byte(sb.String()), CreatedAt: 1_700_000_000_000 + int64(i)*60_000}
	}
	return ms
}

// BenchmarkEncode and BenchmarkDecode measure one segment's encoding and decoding, and
// report its compression ratio.
func BenchmarkEncode(b *testing.B) {
	ms := benchSegment()
	var blob []byte
	var raw int
	for b.Loop() {
		blob, raw, _ = encode(ms)
	}
	b.ReportMetric(float64(raw)/float64(len(blob)), "raw/stored")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(ms)), "µs/msg")
}

func BenchmarkDecode(b *testing.B) {
	ms := benchSegment()
	blob, _, _ := encode(ms)
	seg := store.Segment{ConvID: ms[0].ConvID, FirstSeq: 1, LastSeq: int64(len(ms))}
	for b.Loop() {
		if _, err := decode(blob, seg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(ms)), "µs/msg")
}
