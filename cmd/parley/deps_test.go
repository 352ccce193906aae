package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServerLinksNoLoadTool keeps the server binary only the server: the load tool, its
// charts and histograms live in parley-bench and must not creep back in through an import.
func TestServerLinksNoLoadTool(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on the PATH: cannot list the server's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/parleychat/parley/internal/bench",
		"github.com/go-echarts/",
		"github.com/HdrHistogram/",
		"github.com/chromedp/",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("cmd/parley links %s; the load tool and its dependencies belong in cmd/parley-bench", pkg)
			}
		}
	}
}
