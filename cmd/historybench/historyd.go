package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/historyd/historyd/client"
)

// startTimeout bounds how long historyd may take to serve, and to stop.
const startTimeout = 30 * time.Second

// buildHistoryd builds cmd/historyd into dir with the go command gocmd, from the module root, and
// returns the binary's path.
func buildHistoryd(ctx context.Context, gocmd, dir string) (string, error) {
	bin := filepath.Join(dir, "historyd")
	cmd := exec.CommandContext(ctx, gocmd, "build", "-trimpath", "-o", bin, "./cmd/historyd")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/historyd: %w\n%s", err, out)
	}
	return bin, nil
}

// historyd is one running historyd process.
type historyd struct {
	cmd       *exec.Cmd
	Addr      string // gRPC, from the "serving" log line
	PprofAddr string // from the "serving pprof" line
	Client    *client.Client
	log       *tail
	done      chan struct{}
	waitErr   error
}

// tail keeps the start of the process's log and its last bytes, for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string // the lines up to the serving line
	raw   ring     // the last bytes after it
}

// ring keeps the last ringSize bytes written to it.
type ring struct {
	mu  sync.Mutex
	buf []byte
}

// ringSize is how much of the log's end an error message shows.
const ringSize = 8 << 10

// Write implements io.Writer.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if len(r.buf) > 2*ringSize { // trim now and then, not on every write
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-ringSize:]...)
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf[max(len(r.buf)-ringSize, 0):])
}

const tailLines = 50

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n") + "\n" + t.raw.String()
}

// startHistoryd starts bin with --listen and --pprof-addr on free loopback ports and the other
// flags at their defaults (the memory engine) plus extra, waits until it serves and Health/Check answers SERVING, and
// connects a Client to it with retries off (the load generator measures, it does not retry).
func startHistoryd(ctx context.Context, bin string, extra ...string) (*historyd, error) {
	// --store memory unless extra says otherwise (a later flag wins): the bench's servers never
	// share the default ./data (issue 14).
	args := append([]string{"--listen", "127.0.0.1:0", "--pprof-addr", "127.0.0.1:0", "--log-format", "json", "--store", "memory"}, extra...)
	cmd := exec.Command(bin, args...)
	// Its configuration is its flags alone: a HISTORYD_* variable of the shell (one of another
	// engine is refused at start) must not change what is measured.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HISTORYD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	h := &historyd{cmd: cmd, log: &tail{}, done: make(chan struct{})}
	addrs := make(chan [2]string, 1)
	go h.readLog(stderr, addrs) // ends at the process's exit, when the pipe closes
	go func() {
		h.waitErr = cmd.Wait()
		close(h.done)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case a := <-addrs:
		h.Addr, h.PprofAddr = a[0], a[1]
	case <-h.done:
		return nil, fmt.Errorf("historyd exited before serving (%v):\n%s", h.waitErr, h.log)
	case <-timer.C:
		h.kill()
		return nil, fmt.Errorf("historyd did not serve within %v:\n%s", startTimeout, h.log)
	case <-ctx.Done():
		h.kill()
		return nil, ctx.Err()
	}
	c, err := client.Dial(h.Addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		h.kill()
		return nil, err
	}
	h.Client = c
	if err := waitServing(ctx, c); err != nil {
		_ = h.stop()
		return nil, fmt.Errorf("historyd at %s: %w", h.Addr, err)
	}
	return h, nil
}

// waitServing watches the server's health until it is SERVING, for at most startTimeout: a
// PostgreSQL engine may log "serving" while its pool still connects (issue 16: "health
// NOT_SERVING until it connects").
func waitServing(ctx context.Context, c *client.Client) error {
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	stream, err := c.Health.Watch(cctx, &healthpb.HealthCheckRequest{}, waitForReady())
	if err != nil {
		return fmt.Errorf("not SERVING: %w", err)
	}
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("not SERVING (last %v): %w", last, err)
		}
		if last = resp.GetStatus(); last == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
	}
}

// readLog reads the JSON log lines of the process; it sends the gRPC and pprof addresses once both
// are known (pprof is logged first).
func (h *historyd) readLog(r io.Reader, addrs chan<- [2]string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pprofAddr string
	sent := false
	for !sent && sc.Scan() {
		line := sc.Text()
		h.log.add(line)
		var e struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		switch e.Msg {
		case "serving pprof":
			pprofAddr = e.Address
		case "serving":
			addrs <- [2]string{e.Address, pprofAddr}
			sent = true
		}
	}
	// From here on, one line per RPC: keep only the last bytes, without splitting lines, so that
	// draining the log costs the load generator as little CPU as possible.
	_, _ = io.Copy(&h.log.raw, r)
}

// stop closes the client, sends SIGTERM and waits for the process to exit (SIGKILL after
// startTimeout).
func (h *historyd) stop() error {
	if h.Client != nil {
		_ = h.Client.Close()
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-h.done:
	case <-timer.C:
		h.kill()
		return fmt.Errorf("historyd did not stop within %v; killed", startTimeout)
	}
	var exit *exec.ExitError
	if errors.As(h.waitErr, &exit) {
		return fmt.Errorf("historyd exited with %v:\n%s", h.waitErr, h.log)
	}
	return h.waitErr
}

func (h *historyd) kill() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

// RSS is the process's resident set size in bytes (VmRSS of /proc/PID/status).
func (h *historyd) RSS() (int64, error) {
	return rssOf(h.cmd.Process.Pid)
}

// CPUTime is the CPU time the process has used so far, user and system, all threads (utime and
// stime of /proc/PID/stat, in clock ticks of 10 ms: USER_HZ is 100 on Linux).
func (h *historyd) CPUTime() (time.Duration, error) { return cpuTimeOf(h.cmd.Process.Pid) }

// cpuTimeOf reads the CPU time of process pid (the load generator's own: os.Getpid()).
func cpuTimeOf(pid int) (time.Duration, error) {
	p, err := procTimes(pid)
	return p.cpu, err
}

// procSample is a process's CPU time and its start time (in clock ticks since boot: with the pid,
// it names the process, as a pid alone does not once the pid is reused).
type procSample struct {
	cpu   time.Duration
	start int64
}

// procTimes reads process pid's CPU time and start time from /proc/PID/stat.
func procTimes(pid int) (procSample, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("reading CPU time: %w", err)
	}
	// The command name, in parentheses, may hold spaces: the fields that follow start after the last
	// ')', with the state (field 3); utime and stime are fields 14 and 15, starttime field 22.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return procSample{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var n [3]int64
	for i, s := range []string{f[11], f[12], f[19]} {
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return procSample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return procSample{cpu: time.Duration(n[0]+n[1]) * 10 * time.Millisecond, start: n[2]}, nil
}

func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading resident memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/%d/status", pid)
}
