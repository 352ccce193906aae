package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metric names read from the server's /metrics.
const (
	mCPU         = "process_cpu_seconds_total"
	mRSS         = "process_resident_memory_bytes"
	mCommitCount = "parley_store_commit_batch_size_count"
	mCommitSum   = "parley_store_commit_batch_size_sum"
	mEvents      = "parley_events_committed_total"
	mWSConns     = "parley_ws_connections"
	mHeapInuse   = "go_memstats_heap_inuse_bytes"  // spans holding objects, live or not yet collected
	mStackInuse  = "go_memstats_stack_inuse_bytes" // goroutine stacks
)

// metricSet is one scrape: each series' value summed over its labels, by metric name.
type metricSet map[string]float64

// parseMetrics reads the Prometheus text format, keeping what the load tool needs: every
// sample's value, summed over label sets, under the sample's name.
func parseMetrics(r io.Reader) (metricSet, error) {
	out := metricSet{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// scrape fetches and parses base/metrics.
func scrape(ctx context.Context, hc *http.Client, base string) (metricSet, error) {
	text, err := fetchMetrics(ctx, hc, base)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(text))
}

// fetchMetrics returns the text of base/metrics.
func fetchMetrics(ctx context.Context, hc *http.Client, base string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

// metricLabels returns the labels of the first sample of metric name in the Prometheus
// text, or nil if there is none.
func metricLabels(text []byte, name string) map[string]string {
	labelPair := regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`) // name="value", escapes kept
	for line := range strings.Lines(string(text)) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		out := map[string]string{}
		for _, m := range labelPair.FindAllStringSubmatch(rest, -1) {
			if v, err := strconv.Unquote(`"` + m[2] + `"`); err == nil {
				out[m[1]] = v
			}
		}
		return out
	}
	return nil
}

// sample is one scrape at a time.
type sample struct {
	At time.Time
	M  metricSet
}

// Figures of PostgreSQL that the sampler adds to a cluster's samples (see cluster.go).
const (
	mPGCPU     = "bench_postgres_cpu_seconds" // CPU of the postgres user's processes on this machine
	mNATSCPU   = "bench_nats_cpu_seconds"     // CPU of the nats-server processes on this machine
	mPGCommits = "bench_postgres_xact_commit" // transactions committed in the bench's database
	mPGXid     = "bench_postgres_next_xid"    // the server's next transaction id
	mPGWAL     = "bench_postgres_wal_bytes"   // the server's WAL insert position
)

// sampler scrapes the server's metrics every second while a run lasts. With several nodes
// a sample is the sum of theirs (CPU and memory of all nodes together); a node that stops
// answering (killed) counts with its last answer. extra, if set, adds figures of its own.
type sampler struct {
	hc    *http.Client
	bases []string
	extra func(ctx context.Context, m metricSet)

	mu      sync.Mutex // guards samples, last and err
	samples []sample
	last    map[string]metricSet // each node's last answer
	err     error
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.take(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take scrapes once, records the sample and returns it (nil on failure).
func (s *sampler) take(ctx context.Context) metricSet {
	scraped := make([]metricSet, len(s.bases))
	errs := make([]error, len(s.bases))
	for i, b := range s.bases {
		scraped[i], errs[i] = scrape(ctx, s.hc, b)
	}
	m := metricSet{}
	if s.extra != nil {
		s.extra(ctx, m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]metricSet{}
	}
	for i, b := range s.bases {
		if errs[i] == nil {
			s.last[b] = scraped[i]
		}
		last, ok := s.last[b]
		if !ok {
			if s.err == nil && ctx.Err() == nil {
				s.err = errs[i]
			}
			return nil
		}
		for k, v := range last {
			m[k] += v
		}
	}
	s.samples = append(s.samples, sample{At: time.Now(), M: m})
	return m
}

// window returns the samples taken between from and to.
func (s *sampler) window(from, to time.Time) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sample
	for _, x := range s.samples {
		if !x.At.Before(from) && !x.At.After(to) {
			out = append(out, x)
		}
	}
	return out
}

// serverStats are the server's figures over a time window.
type serverStats struct {
	CPUSeconds float64
	CPUPct     float64
	RSSStart   float64
	RSSPeak    float64
	RSSEnd     float64
	Deltas     metricSet // end minus start of every counter-like series
	OK         bool
}

// stats computes the server's CPU share and memory between the samples nearest from and to.
func statsOf(samples []sample) serverStats {
	var st serverStats
	if len(samples) < 2 {
		return st
	}
	first, last := samples[0], samples[len(samples)-1]
	wall := last.At.Sub(first.At).Seconds()
	st.OK = true
	st.CPUSeconds = last.M[mCPU] - first.M[mCPU]
	if wall > 0 {
		st.CPUPct = 100 * st.CPUSeconds / wall
	}
	st.RSSStart, st.RSSEnd = first.M[mRSS], last.M[mRSS]
	for _, x := range samples {
		st.RSSPeak = max(st.RSSPeak, x.M[mRSS])
	}
	st.Deltas = metricSet{}
	for k, v := range last.M {
		if strings.HasSuffix(k, "_total") || strings.HasSuffix(k, "_count") || strings.HasSuffix(k, "_sum") {
			st.Deltas[k] = v - first.M[k]
		}
	}
	return st
}
