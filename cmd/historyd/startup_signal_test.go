package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// logLevels returns the level and message of each JSON log line.
func logLevels(t *testing.T, lines []string) (levels, msgs []string) {
	t.Helper()
	for _, line := range lines {
		var obj struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		levels, msgs = append(levels, obj.Level), append(msgs, obj.Msg)
	}
	return levels, msgs
}

// TestStopSignalWhileConnecting: SIGTERM or SIGINT while the store opens (here: PostgreSQL that
// accepts the connection and never answers, the open waiting for its ping) is a stop asked for:
// exit 0 with an info line, as the README promises for SIGTERM. It exited 1 with an error line
// `PostgreSQL: context canceled`.
func TestStopSignalWhileConnecting(t *testing.T) {
	addr, accepted := pgtest.SilentServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := newLogSink()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--store", "postgres",
			"--postgres-url", "postgres://historyd:s3cret@" + addr + "/historyd?sslmode=disable"}, envOf(nil), sink)
	}()
	select {
	case <-accepted: // the open is under way, waiting for the server
	case code := <-done:
		t.Fatalf("run = %d before connecting: %q", code, sink.lines())
	case <-time.After(testTimeout):
		t.Fatalf("run did not connect within %v: %q", testTimeout, sink.lines())
	}
	cancel() // what the first SIGINT or SIGTERM does (signals.go)
	select {
	case code := <-done:
		levels, msgs := logLevels(t, sink.lines())
		if code != 0 || len(msgs) != 1 || levels[0] != "info" || !strings.HasPrefix(msgs[0], "stopped before serving") {
			t.Errorf("a stop while connecting: run = %d, log %q; want 0 and one info line, stopped before serving", code, sink.lines())
		}
	case <-time.After(testTimeout):
		t.Fatal("run did not return after its context ended")
	}
}

// TestStopSignalBeforeOpening: a stop signal before the sqlite store opens also exits 0, with the
// info line; but a store that fails to open for its own reason (a data directory that cannot be
// created) still exits 1 with its error, signal or not.
func TestStopSignalBeforeOpening(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	sink := newLogSink()
	code := run(stopped, []string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, envOf(nil), sink)
	levels, msgs := logLevels(t, sink.lines())
	if code != 0 || len(msgs) != 1 || levels[0] != "info" || !strings.HasPrefix(msgs[0], "stopped before serving") {
		t.Errorf("a stop before the sqlite open: run = %d, log %q; want 0 and one info line", code, sink.lines())
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []context.Context{context.Background(), stopped} {
		sink := newLogSink()
		code := run(ctx, []string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(file, "data")}, envOf(nil), sink)
		levels, msgs := logLevels(t, sink.lines())
		if code != 1 || len(msgs) != 1 || levels[0] != "error" || !strings.Contains(msgs[0], "cannot be created") {
			t.Errorf("a data directory under a file (context ended: %v): run = %d, log %q; want 1 and its error", ctx.Err() != nil, code, sink.lines())
		}
	}
}

// TestSIGTERMWhileConnectingProcess is TestStopSignalWhileConnecting with the real process and a
// real SIGTERM, as the reviewer ran it: exit 0, "stopped before serving", no error line.
func TestSIGTERMWhileConnectingProcess(t *testing.T) {
	addr, accepted := pgtest.SilentServer(t)
	p := startProcess(t, []string{"--listen", "127.0.0.1:0", "--store", "postgres",
		"--postgres-url", "postgres://historyd@" + addr + "/historyd?sslmode=disable"})
	select {
	case <-accepted: // the open is under way, waiting for the server
	case <-p.done:
		t.Fatalf("historyd exited (%v) before connecting: %s", p.err, p.stderr.String())
	case <-time.After(2 * testTimeout):
		t.Fatalf("historyd did not connect within %v: %s", 2*testTimeout, p.stderr.String())
	}
	code := p.stop(t, syscall.SIGTERM)
	log := p.stderr.String()
	if code != 0 || !strings.Contains(log, `"msg":"stopped before serving`) || strings.Contains(log, `"level":"error"`) {
		t.Errorf("SIGTERM while connecting: exit %d, log %s; want 0 and the info line", code, log)
	}
}
