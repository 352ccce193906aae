package bench

import (
	"cmp"
	"context"
	"os"
	"runtime"
)

// Env records what a report measured and from where, so that two reports are compared only
// when they are comparable: the server's version and engine, the load tool's machine.
type Env struct {
	// The server's, from its parley_build_info metric; "unknown" for a server that does
	// not publish it (an older version, the echo server).
	ServerVersion string   `json:"server_version"`
	Engine        string   `json:"engine"`
	ServerGo      string   `json:"server_go_version"`
	ServerArgs    []string `json:"server_args,omitempty"` // extra flags of a server the bench started

	// The load tool's.
	BenchVersion string `json:"bench_version"`
	GoVersion    string `json:"go_version"`
	Host         string `json:"host"`
	CPUs         int    `json:"cpus"`
	OSArch       string `json:"os_arch"`
}

// environment describes this run: the load tool's side from the runtime, the server's from
// its /metrics.
func (c *coord) environment(ctx context.Context) Env {
	host, _ := os.Hostname()
	e := Env{
		BenchVersion: cmp.Or(c.opts.Version, "dev"),
		GoVersion:    runtime.Version(),
		Host:         cmp.Or(host, "unknown"),
		CPUs:         runtime.NumCPU(),
		OSArch:       runtime.GOOS + "/" + runtime.GOARCH,
	}
	if c.spawned {
		e.ServerArgs = c.cfg.ServerArgs
	}
	var info map[string]string
	if text, err := fetchMetrics(ctx, c.hc, c.base); err == nil {
		info = metricLabels(text, "parley_build_info")
	}
	e.ServerVersion = cmp.Or(info["version"], "unknown")
	e.Engine = cmp.Or(info["engine"], "unknown")
	e.ServerGo = cmp.Or(info["go_version"], "unknown")
	return e
}
