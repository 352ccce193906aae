package bench

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/parleychat/parley/protocol"
)

// Typing in the largegroup scenario (--typers; docs/design.md, "Typing cannot storm"): the
// typers send "started" into the group every TypingEveryMS, as a client typing on does, and
// every open connection records when each typing push of the group arrived. The figures:
// the most typing pushes one open connection got in any second, and the shortest gap
// between two (the server's bound is one a second), beside the send-ack p99 of the same
// run, to compare with a run without typers.

// typingEvery is how often a typer sends "started": the server forwards one per 3 s.
const typingEvery = protocol.TypingEveryMS * time.Millisecond

// typeLoop sends "started" from c into the group every typingEvery until the load ends,
// starting at a random point of the first interval so that the typers do not start at once.
func (l *roomLoad) typeLoop(ctx context.Context, c *roomConn, at time.Time) {
	first := at.Add(time.Duration(rand.Int64N(int64(typingEvery))))
	paced(ctx, typingEvery, first, 0, func(time.Time) {
		octx, cancel := opContext(ctx)
		defer cancel()
		_, err := c.call(octx, protocol.OpTyping, func(p []byte) []byte {
			return append(appendConvParam(p, l.job.Conv), `,"state":"started"`...)
		})
		if err != nil {
			l.w.rec.fail(err)
			return
		}
		l.w.rec.count("typing_sent", 1)
	})
}

// typingJitter is what the measurements allow for the scheduling of the server's and the
// generator's goroutines: the server spaces pushes a second apart by its clock, and two of
// them may arrive 998 ms apart.
const typingJitter = 100 * time.Millisecond

// measureTyping records, for each open connection, its typing pushes, the gaps between
// them and the most it got within one second (less typingJitter); a gap under that breaks
// the bound.
func (l *roomLoad) measureTyping() {
	w := l.w
	for _, c := range l.conns {
		c.mu.Lock()
		at := append([]time.Time(nil), c.typing...)
		c.mu.Unlock()
		if !c.spec.Open || len(at) == 0 {
			continue
		}
		w.rec.count("typing_pushes", int64(len(at)))
		w.rec.raise("typing_per_conn_per_sec_max", int64(maxWithin(at, time.Second-typingJitter)))
		for i := 1; i < len(at); i++ {
			g := at[i].Sub(at[i-1])
			w.rec.latency("typing_gap", g)
			if g < time.Second-typingJitter {
				w.v.Reportf(VNoticeRate, c.label, l.job.Conv, "two typing pushes %v apart", g)
			}
		}
	}
}

// maxWithin returns the most of the ascending times at that fall within a window of d.
func maxWithin(at []time.Time, d time.Duration) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= d {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// typingFigures puts the typing measurements into the report.
func typingFigures(r *Report) {
	if n := r.Counts["typing_sent"]; n > 0 {
		r.Extra["typing_sent"] = float64(n)
		r.Extra["typing_pushes"] = float64(r.Counts["typing_pushes"])
		r.Extra["typing_per_conn_per_sec_max"] = float64(r.maxes["typing_per_conn_per_sec_max"])
		if h := r.named["typing_gap"]; h != nil && h.TotalCount() > 0 {
			r.Extra["typing_gap_min_ms"] = float64(h.Min()) / 1000
		}
	}
}
