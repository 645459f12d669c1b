package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testTimeout = 10 * time.Second

// logSink collects stderr lines and reports the address of the "serving" line.
type logSink struct {
	mu      sync.Mutex
	buf     strings.Builder
	serving chan string
	once    sync.Once
}

func newLogSink() *logSink { return &logSink{serving: make(chan string, 1)} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for _, line := range strings.Split(string(p), "\n") {
		var obj struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &obj) == nil && obj.Msg == "serving" {
			s.once.Do(func() { s.serving <- obj.Address })
		}
	}
	return len(p), nil
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimRight(s.buf.String(), "\n"), "\n")
}

// TestRunUsageErrors: an unknown flag or an invalid value exits 2 with a usage line.
func TestRunUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"--log-format", "yaml"}, {"extra"}} {
		var out strings.Builder
		code := run(context.Background(), args, envOf(nil), &out)
		if code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
		if !strings.Contains(out.String(), "usage: historyd") {
			t.Errorf("run(%q) printed %q, want a usage line", args, out.String())
		}
	}
}

// TestRunHelp: --help prints the usage and exits 0.
func TestRunHelp(t *testing.T) {
	var out strings.Builder
	if code := run(context.Background(), []string{"--help"}, envOf(nil), &out); code != 0 {
		t.Errorf("run(--help) = %d, want 0", code)
	}
	if !strings.HasPrefix(out.String(), "usage: historyd") {
		t.Errorf("run(--help) printed %q", out.String())
	}
}

// TestRunAddressInUse: when the address is taken, run exits 1 after exactly one log line that
// names the address (issue 2 acceptance).
func TestRunAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()

	var out strings.Builder
	code := run(context.Background(), []string{"--listen", addr}, envOf(nil), &out)
	if code != 1 {
		t.Errorf("run on a taken address = %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("run printed %d lines, want exactly 1: %q", len(lines), out.String())
	}
	var obj struct{ Level, Msg, Address string }
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatalf("line %q is not JSON: %v", lines[0], err)
	}
	if obj.Level != "error" || !strings.Contains(obj.Msg, addr) || obj.Address != addr {
		t.Errorf("line = %+v, want an error naming %s", obj, addr)
	}
}

// TestRunServesUntilCancelled: run serves on the configured address and, once its context ends
// (what SIGINT/SIGTERM do), shuts down and exits 0.
func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := newLogSink()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--grace-period", "5s"}, envOf(nil), sink)
	}()

	var addr string
	select {
	case addr = <-sink.serving:
	case code := <-done:
		t.Fatalf("run exited %d before serving: %q", code, sink.lines())
	case <-time.After(testTimeout):
		t.Fatalf("no serving line within %v: %q", testTimeout, sink.lines())
	}
	conn, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatalf("dialing the served address %s: %v", addr, err)
	}
	conn.Close()

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d after cancel, want 0; log %q", code, sink.lines())
		}
	case <-time.After(testTimeout):
		t.Fatal("run did not return after its context ended")
	}
	last := sink.lines()[len(sink.lines())-1]
	if !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("last log line = %q, want the stopped line", last)
	}
}
