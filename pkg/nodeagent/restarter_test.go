package nodeagent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A node whose runtime the agent cannot reach has no in-place restart, and says so; the
// agent runs on (dialRestarter returns nil rather than an error).
func TestDialRestarterFailsSoft(t *testing.T) {
	notCRI := filepath.Join(t.TempDir(), "not-cri.sock")
	ln, err := net.Listen("unix", notCRI)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // a socket that speaks no CRI
		}
	}()
	for name, endpoint := range map[string]string{
		"no endpoint":         "",
		"no socket":           "unix://" + filepath.Join(t.TempDir(), "none.sock"),
		"not a unix endpoint": "tcp://127.0.0.1:1",
		"a socket but no CRI": "unix://" + notCRI,
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if r := dialRestarter(ctx, endpoint, slog.New(slog.NewTextHandler(&out, nil))); r != nil {
				r.Close()
				t.Fatalf("dialRestarter(%q) = a restarter, want none", endpoint)
			}
			if !strings.Contains(out.String(), "in-place restart off on this node") {
				t.Errorf("log %q: want it to say in-place restart is off", out.String())
			}
		})
	}
}
