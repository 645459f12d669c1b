//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startTimeout bounds how long a process may take to serve, and every other wait in these tests;
// generous because the first `go build` in TestMain warms the caches, not the start itself.
const startTimeout = 30 * time.Second

// Paths of the binaries TestMain builds once for the whole package.
var (
	historydBin string
	testhookBin string // historyd built with -tags historyd_testhook
	grpcurlBin  string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "historyd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	historydBin = filepath.Join(dir, "historyd")
	testhookBin = filepath.Join(dir, "historyd-testhook")
	grpcurlBin = filepath.Join(dir, "grpcurl")
	builds := [][]string{
		// historyd through `make build`, the command deploy/Dockerfile runs (via make release), so
		// what these tests exercise is what ships (issue 7).
		{"make", "build", "BIN=" + historydBin, "GO=" + goCmd()},
		// The same build with the test hooks (hostile_test.go): a handler that panics, a forced GC.
		{"make", "build", "BIN=" + testhookBin, "TAGS=historyd_testhook", "GO=" + goCmd()},
		// grpcurl is pinned in tools/go.mod; building it here means the tests need only Go and make.
		{goCmd(), "build", "-modfile=tools/go.mod", "-o", grpcurlBin, "github.com/fullstorydev/grpcurl/cmd/grpcurl"},
	}
	for _, args := range builds {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s: %v\n%s", strings.Join(args, " "), err, out)
			return 1
		}
	}
	return m.Run()
}

// goCmd is the go command to build with: $GO when the Makefile passes one, else go on PATH.
func goCmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot() (string, error) {
	out, err := exec.Command(goCmd(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the historyd module")
	}
	return filepath.Dir(gomod), nil
}

// proc is one historyd process started by a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *logLines
	addr   string        // the address from its "serving" line, once it serves
	done   chan struct{} // closed when the process has exited and been reaped
	err    error         // cmd.Wait's result, valid after done
}

// logLines collects a process's stderr (JSON log lines) and reports the "serving" address.
type logLines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	serving chan string
	sent    bool
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if !l.sent {
		for _, line := range l.lockedLines() {
			var e struct{ Msg, Address string }
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "serving" {
				l.serving <- e.Address
				l.sent = true
				break
			}
		}
	}
	return len(p), nil
}

func (l *logLines) lockedLines() []string {
	s := strings.TrimRight(l.buf.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Lines returns the complete lines written so far.
func (l *logLines) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lockedLines()
}

// startProcess starts historyd with args and returns at once; the process is killed at the end of
// the test if it is still running.
func startProcess(t *testing.T, args ...string) *proc {
	t.Helper()
	return startBinary(t, historydBin, args...)
}

// startBinary is startProcess for another build of historyd (testhookBin). It serves with
// --store memory unless args say otherwise (flags later on the line win): the tests were written
// for the memory engine, and parallel servers must never share the default ./data (issue 14). The
// durability tests (restart_test.go) pass --store sqlite and a temporary --data-dir.
func startBinary(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	args = append([]string{"--store", "memory"}, args...)
	cmd := exec.Command(bin, args...)
	if as := os.Getenv("HISTORYD_E2E_AS_LIMIT"); as != "" {
		// make hostile runs every server under an address-space limit (issue 11: "historyd under
		// prlimit --as=2G survives make hostile"); prlimit execs historyd, so the PID is historyd's.
		cmd = exec.Command("prlimit", append([]string{"--as=" + as, "--", bin}, args...)...)
	}
	// A variable of an engine's own setting exported in the developer's shell
	// (HISTORYD_POSTGRES_URL, as the README's scaling-out example does) must not reach it: one of
	// another engine is refused at start (exit 2). The tests' own variables (t.Setenv) do.
	cmd.Env = withoutEngineEnv(os.Environ())
	p := &proc{
		cmd:    cmd,
		stderr: &logLines{serving: make(chan string, 1)},
		done:   make(chan struct{}),
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting historyd: %v", err)
	}
	go func() { // owned by p: ends when the process exits, which Cleanup forces
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Logf("historyd was still running at the end of the test; killed. Log:\n%s",
				strings.Join(p.stderr.Lines(), "\n"))
		}
	})
	return p
}

// startServer starts historyd on a free port (--listen 127.0.0.1:0, JSON logs; extraArgs come
// after and so override) and returns once grpc.health.v1 reports SERVING.
func startServer(t *testing.T, extraArgs ...string) *proc {
	t.Helper()
	return startServerBinary(t, historydBin, extraArgs...)
}

// startServerBinary is startServer for another build of historyd (testhookBin). It waits for
// SERVING with waitServing, so a server that needs client certificates cannot be started with it.
func startServerBinary(t *testing.T, bin string, extraArgs ...string) *proc {
	t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--log-format", "json"}, extraArgs...)
	p := startBinary(t, bin, args...)
	awaitServing(t, p)
	return p
}

// awaitServing waits for a process started with --listen and --log-format json to log its serving
// line (setting p.addr), then for SERVING: startServer's second half, for tests that start several
// processes at once (the PostgreSQL replicas migrate together) before waiting for any.
func awaitServing(t *testing.T, p *proc) {
	t.Helper()
	awaitServingLine(t, p)
	waitServing(t, p)
}

// awaitServingLine waits for p's serving line and sets p.addr; health may still be NOT_SERVING (a
// replica whose database does not answer yet serves, NOT_SERVING, and retries).
func awaitServingLine(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	select {
	case p.addr = <-p.stderr.serving:
	case <-p.done:
		t.Fatalf("historyd exited before serving (%v):\n%s", p.err, strings.Join(p.stderr.Lines(), "\n"))
	case <-deadline.C:
		t.Fatalf("historyd did not log a serving line within %v:\n%s", startTimeout, strings.Join(p.stderr.Lines(), "\n"))
	}
}

// dial returns a client connection to p, closed at the end of the test.
func dial(t *testing.T, p *proc) *grpc.ClientConn {
	t.Helper()
	return dialAddr(t, p.addr)
}

// dialAddr returns a client connection to addr, closed at the end of the test.
func dialAddr(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitServing polls grpc.health.v1 Check on p until it answers SERVING, failing the test at
// startTimeout. The ticker paces the polls; nothing waits on the clock for a result.
func waitServing(t *testing.T, p *proc) {
	t.Helper()
	client := healthpb.NewHealthClient(dial(t, p))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		last = err
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("historyd exited while waiting for SERVING (%v)", p.err)
		case <-ctx.Done():
			t.Fatalf("historyd at %s not SERVING within %v (last error %v)", p.addr, startTimeout, last)
		}
	}
}

// grpcurl runs the grpcurl built by TestMain with args and returns its stdout; a non-zero exit
// fails the test.
func grpcurl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, grpcurlBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("grpcurl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// wait waits up to timeout for p to exit and returns its exit code and how long it took; a
// process still running at the timeout fails the test.
func wait(t *testing.T, p *proc, timeout time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-p.done:
	case <-deadline.C:
		t.Fatalf("historyd still running %v after being told to stop; log:\n%s", timeout, strings.Join(p.stderr.Lines(), "\n"))
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// stop sends sig to p and waits up to timeout for it to exit, returning its exit code and how
// long it took. It also checks that the process is gone from the process table.
func stop(t *testing.T, p *proc, sig syscall.Signal, timeout time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling historyd: %v", err)
	}
	code, _ := wait(t, p, timeout)
	elapsed := time.Since(start)
	if err := syscall.Kill(p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after exit, kill(pid, 0) = %v, want ESRCH (process gone)", err)
	}
	return code, elapsed
}

// withoutEngineEnv is env less the variables of the settings only some engines read
// (cmd/historyd/config_engine.go): the harness picks each server's engine with flags.
func withoutEngineEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); {
		case strings.HasPrefix(name, "HISTORYD_POSTGRES_"), name == "HISTORYD_MEMORY_BUDGET", name == "HISTORYD_EXCHANGE_MAX_BYTES":
			continue
		}
		out = append(out, kv)
	}
	return out
}
