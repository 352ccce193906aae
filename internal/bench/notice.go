package bench

import (
	"cmp"
	"slices"
	"time"
)

// A notice (issue 9) tells an online member who does not have a read-fanout conversation
// open that it changed: conv_id, max_seq and the unread count, never the body, at most once
// per conversation per connection per second. It names no message, so the bench measures it
// against the send times of the messages it covers: a message is notified on a connection
// when the first notice whose max_seq reaches its seq arrives there. The senders' workers
// report those send times with their acks (wire op "sent"), and the coordinator hands all of
// them to every worker for its drain.

// SentAt is when the message with seq was sent: the time its send was scheduled, as its
// ack latency counts from there.
type SentAt struct {
	Seq int64 `json:"s"`
	At  int64 `json:"t"` // unix nanos
}

// noticeAt is a notice as one connection received it.
type noticeAt struct {
	maxSeq int64
	at     time.Time
}

// noticeFigures is what one connection's notices of one conversation say.
type noticeFigures struct {
	latencies []time.Duration // per message sent, from its send to the first notice covering it
	missed    int             // messages sent that no notice covered
	gaps      []time.Duration // between consecutive notices
	rate      float64         // notices per second between the first and the last (0 for fewer than 2)
	tooMany   bool            // more notices than one a second allows
}

// analyseNotices measures the notices ns (in order of arrival) of one connection against the
// messages sent (sorted by seq).
func analyseNotices(ns []noticeAt, sent []SentAt) noticeFigures {
	var f noticeFigures
	i := 0
	covered := int64(-1)
	for k, n := range ns {
		if k > 0 {
			f.gaps = append(f.gaps, n.at.Sub(ns[k-1].at))
		}
		if n.maxSeq <= covered {
			continue
		}
		covered = n.maxSeq
		for ; i < len(sent) && sent[i].Seq <= n.maxSeq; i++ {
			f.latencies = append(f.latencies, max(n.at.Sub(time.Unix(0, sent[i].At)), 0))
		}
	}
	f.missed = len(sent) - i
	if len(ns) >= 2 {
		span := ns[len(ns)-1].at.Sub(ns[0].at)
		if span > 0 {
			f.rate = float64(len(ns)-1) / span.Seconds()
		}
		f.tooMany = !withinRate(len(ns), span)
	}
	return f
}

// withinRate reports whether n pushes whose first and last arrived span apart respect "at
// most one a second", which needs n-1 seconds between the first and the last when they are
// sent. Arrivals are looser than sends: a push that waited in a queue (on a machine the
// generator shares with the server, a second or two under load) arrives closer to the next
// one, so rateSlack seconds of such compression are allowed. A server that stops coalescing
// sends one push per message, 20 a second at largegroup's rate, far beyond it.
func withinRate(n int, span time.Duration) bool {
	return n <= 2 || float64(n-1) <= span.Seconds()+rateSlack
}

// rateSlack is how many seconds of queueing withinRate allows for.
const rateSlack = 3

// sortedTimes returns the send times of conv in times, sorted by seq.
func sortedTimes(times map[string][]SentAt, conv string) []SentAt {
	out := slices.Clone(times[conv])
	slices.SortFunc(out, func(a, b SentAt) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// mergeTimes adds the send times of parts, per conversation.
func mergeTimes(parts ...map[string][]SentAt) map[string][]SentAt {
	out := map[string][]SentAt{}
	for _, p := range parts {
		for conv, ts := range p {
			out[conv] = append(out[conv], ts...)
		}
	}
	return out
}
