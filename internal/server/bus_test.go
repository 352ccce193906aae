package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/bus"
)

// Bus credentials without a bus URL are a mistake (the node would run alone, unlinked):
// refused before the data directory is touched.
func TestNewRefusesBusAuthWithoutURL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg := DefaultConfig(dir)
	cfg.BusAuth = bus.NATSAuth{CredsFile: "/etc/parley/node.creds"}
	s, err := New(context.Background(), cfg)
	if err == nil {
		s.Close()
		t.Fatal("New started a node with bus credentials and no bus URL")
	}
	if !strings.Contains(err.Error(), "only used with BusURL") {
		t.Errorf("New = %v, want it to name the missing bus URL", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data directory was created (stat: %v)", err)
	}
}
