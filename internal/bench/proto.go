package bench

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// The coordinator (the `parley-bench` process) and its workers talk in JSON lines: the
// coordinator writes commands to a worker's stdin, the worker answers on its stdout. An
// in-process worker speaks the same protocol over pipes, so both paths run the same code.
//
//	coordinator -> worker        worker -> coordinator
//	job                          ready            devices connected
//	start {at}                   progress ...     every 500 ms while loading
//	stop (optional, early end)   sent {acks}      load finished, acks of this worker
//	drain {targets, hold}        result           receivers caught up (or timed out)
//	                             fail {error}     at any point: the worker gave up
//	kill {node, at} (optional: the coordinator SIGKILLed a node at `at`)

// Wire ops.
const (
	opJob      = "job"
	opReady    = "ready"
	opStart    = "start"
	opStop     = "stop"
	opProgress = "progress"
	opSent     = "sent"
	opDrain    = "drain"
	opResult   = "result"
	opFail     = "fail"
	opKill     = "kill"
)

// Account is one device's credentials.
type Account struct {
	User   string `json:"user"`
	Device string `json:"device"`
	Token  string `json:"token"`
	Node   int    `json:"node,omitempty"` // index into Job.Nodes: the node it connects to
}

// DeviceSpec is a device a worker drives and checks.
type DeviceSpec struct {
	Account
	Convs  map[string]int64 `json:"convs"`  // conversations it is in -> the seq its messages start after
	Online bool             `json:"online"` // keeps a WebSocket open (false: HTTP calls only)
}

// SenderSpec makes a device send into a conversation.
type SenderSpec struct {
	Device int     `json:"device"` // index into Job.Devices (echo: the sender's number)
	Conv   string  `json:"conv"`   // echo: the stand-in conv_id its frames carry
	Quota  int64   `json:"quota"`  // messages to send; 0: until the duration ends; < 0: none
	Rate   float64 `json:"rate"`   // sends/s on a fixed schedule; 0: closed loop
}

// Job is one worker's share of a run.
type Job struct {
	Scenario string   `json:"scenario"`
	Worker   int      `json:"worker"`
	Server   string   `json:"server"`          // the first node
	Nodes    []string `json:"nodes,omitempty"` // every node, when there are several
	// Resync (several nodes without a known bus) has devices that wait for messages sync
	// again by reconnecting: a node learns nothing of what the others store, so a device
	// receives what another node stored only when it next syncs.
	Resync bool `json:"resync,omitempty"`
	// Failover (--kill-node-after) has the worker watch the nodes' health and move the
	// devices of a node that died to the next live one.
	Failover bool          `json:"failover,omitempty"`
	Duration time.Duration `json:"duration"` // 0: until quotas are met
	Interval time.Duration `json:"interval"` // time slot of the charts
	Size     int           `json:"size"`

	Devices []DeviceSpec `json:"devices,omitempty"`
	Senders []SenderSpec `json:"senders,omitempty"` // direct, group

	Conv   string `json:"conv,omitempty"`   // read-storm: the group
	Repeat int    `json:"repeat,omitempty"` // read-storm: reads per member per round
	Quota  int64  `json:"quota,omitempty"`  // read-storm: rounds; mixed: sends (0: no limit; < 0: none)

	Rate float64 `json:"rate,omitempty"` // mixed: this worker's actions/s

	Conns     []Account     `json:"conns,omitempty"` // idle
	Heartbeat time.Duration `json:"heartbeat,omitempty"`

	Room *RoomJob `json:"room,omitempty"` // largegroup, readstorm, broadcast, broadcast-naive

	DrainTimeout time.Duration `json:"drain_timeout"`
}

// progress is a worker's running totals.
type progress struct {
	Ops        int64 `json:"ops"`
	Acked      int64 `json:"acked"`
	Delivered  int64 `json:"delivered"`
	Errors     int64 `json:"errors"`
	Violations int64 `json:"violations"`
}

// Result is everything a worker measured and checked.
type Result struct {
	measures
	Recvs      []RecvSummary    `json:"recvs,omitempty"`
	Violations int64            `json:"violations"`
	ByKind     map[string]int64 `json:"violations_by_kind,omitempty"`
	Samples    []Violation      `json:"violation_samples,omitempty"`
	CPUSeconds float64          `json:"cpu_seconds"`
	MaxRSS     int64            `json:"max_rss"`
}

// wire is one line of the protocol.
type wire struct {
	Op       string                 `json:"op"`
	Job      *Job                   `json:"job,omitempty"`
	At       int64                  `json:"at,omitempty"` // unix nanos
	Targets  map[string]int64       `json:"targets,omitempty"`
	Hold     time.Duration          `json:"hold,omitempty"`
	Progress *progress              `json:"progress,omitempty"`
	Acks     map[string]*AckSummary `json:"acks,omitempty"`
	// Times (sent and drain) are the send times of the acked messages, per conversation:
	// the senders' workers report theirs, and the coordinator hands all of them to every
	// worker, whose connections measure notices against them (a notice carries no body).
	Times  map[string][]SentAt `json:"times,omitempty"`
	Result *Result             `json:"result,omitempty"`
	Error  string              `json:"error,omitempty"`
	Node   int                 `json:"node,omitempty"` // kill: the node killed
}

// nodeURL returns the base URL of the node a's device connects to.
func (j *Job) nodeURL(a Account) string {
	if a.Node >= 0 && a.Node < len(j.Nodes) {
		return j.Nodes[a.Node]
	}
	return j.Server
}

// lineWriter writes wire messages, one per line, from any goroutine.
type lineWriter struct {
	mu  sync.Mutex // serialises writes
	enc *json.Encoder
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{enc: json.NewEncoder(w)} }

func (l *lineWriter) send(m wire) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.enc.Encode(m)
}

// readLines decodes wire messages from r into a channel, closed at the end of r.
func readLines(r io.Reader) <-chan wire {
	ch := make(chan wire, 16)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(r)
		for {
			var m wire
			if err := dec.Decode(&m); err != nil {
				return
			}
			ch <- m
		}
	}()
	return ch
}
