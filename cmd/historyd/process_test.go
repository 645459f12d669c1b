package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// envRunMain makes the test binary run main() instead of the tests (TestMain): the real process,
// with its own command line and signals.
const envRunMain = "HISTORYD_TEST_RUN_MAIN"

// process is historyd run as a process of its own: this test binary with envRunMain set.
type process struct {
	cmd    *exec.Cmd
	stderr *processLog
	addrs  map[string]chan string // the awaited messages' addresses, each sent once
	done   chan struct{}          // closed once the process has exited and been reaped
	err    error                  // cmd.Wait's, valid after done
}

// processLog collects the process's JSON log lines and hands over the address of the first line
// with a given message.
type processLog struct {
	mu    sync.Mutex
	buf   strings.Builder
	wants map[string]chan string
}

func (l *processLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var e struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if ch, ok := l.wants[e.Msg]; ok {
			ch <- e.Address
			delete(l.wants, e.Msg)
		}
	}
	return len(p), nil
}

func (l *processLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startProcess starts historyd with args and an environment of no HISTORYD_* variables but the
// test's own; msgs are the log messages whose address the caller will await (awaitAddress).
func startProcess(t *testing.T, args []string, msgs ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HISTORYD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envRunMain+"=1")
	log := &processLog{wants: map[string]chan string{}}
	p := &process{cmd: cmd, stderr: log, addrs: map[string]chan string{}, done: make(chan struct{})}
	for _, m := range msgs {
		p.addrs[m] = make(chan string, 1)
		log.wants[m] = p.addrs[m]
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned by p: ends when the process exits, which Cleanup forces
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
			t.Logf("historyd was still running at the end of the test; killed. Log:\n%s", log.String())
		}
	})
	return p
}

// awaitAddress returns the address of p's first log line with message msg.
func (p *process) awaitAddress(t *testing.T, msg string) string {
	t.Helper()
	select {
	case addr := <-p.addrs[msg]:
		return addr
	case <-p.done:
		t.Fatalf("historyd exited (%v) before logging %q: %s", p.err, msg, p.stderr.String())
	case <-time.After(2 * testTimeout):
		t.Fatalf("historyd logged no %q within %v: %s", msg, 2*testTimeout, p.stderr.String())
	}
	return ""
}

// stop sends sig and returns the exit code.
func (p *process) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(2 * testTimeout):
		t.Fatalf("historyd did not exit within %v of %v: %s", 2*testTimeout, sig, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}
