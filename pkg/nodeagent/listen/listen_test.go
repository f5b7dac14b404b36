package listen

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// A port 0 becomes the port the kernel picked, in the line; a taken address fails naming the
// flag.
func TestTCPLogsTheAddressItGot(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	ln, err := TCP("--http-address", "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var line struct{ Msg, Flag, Address string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line.Msg != LogMessage || line.Flag != "--http-address" || line.Address != ln.Addr().String() || strings.HasSuffix(line.Address, ":0") {
		t.Errorf("logged %+v, want %q, --http-address and %s", line, LogMessage, ln.Addr())
	}
	if _, err := TCP("--simulate-address", ln.Addr().String(), log); err == nil || !strings.Contains(err.Error(), "--simulate-address "+ln.Addr().String()) {
		t.Errorf("a taken address: error %v, want one naming the flag and the address", err)
	}
}
