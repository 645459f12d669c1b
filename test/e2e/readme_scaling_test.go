//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// TestReplicasScalingOutREADME runs the README's "Scaling out" block (issue 17: "README 'Scaling out' with a
// two-replica example on a local PostgreSQL") as pasted into bash, with what this machine's run
// must differ in: the binary TestMain built for `make build` and bin/historyd, the pinned grpcurl,
// a fresh schema of the test PostgreSQL for the database createdb makes, and two free ports for
// 50051 and 50052 (other tests' servers may hold those). The pop through replica 2 must answer
// the message sent through it and routed by replica 1, and GetBranch on replica 2 the branch made
// on replica 1.
func TestReplicasScalingOutREADME(t *testing.T) {
	_, block, ok := strings.Cut(readREADME(t), "<!-- readme-test: scaling-out -->\n```sh\n")
	if !ok {
		t.Fatal("README has no scaling-out block")
	}
	block, _, _ = strings.Cut(block, "```")
	url := pgtest.New(t)
	const readmeURL = "postgres://postgres@127.0.0.1:5432/historyd?sslmode=disable"
	var script []string
	for _, line := range strings.Split(block, "\n") {
		switch {
		case line == "make build", strings.HasPrefix(line, "createdb "):
			continue // TestMain built the binary; pgtest made the schema
		case strings.Contains(line, "HISTORYD_POSTGRES_URL=") && !strings.Contains(line, readmeURL):
			t.Fatalf("the README's URL line %q no longer names %s", line, readmeURL)
		}
		script = append(script, line)
	}
	s := strings.Join(script, "\n")
	for _, r := range []struct{ from, to string }{
		{readmeURL, url},
		{"bin/historyd", historydBin},
		{grpcurlCmd, grpcurlBin},
		{"127.0.0.1:50051", "127.0.0.1:" + freePort(t)},
		{"127.0.0.1:50052", "127.0.0.1:" + freePort(t)},
	} {
		if !strings.Contains(s, r.from) {
			t.Fatalf("the scaling-out block no longer contains %q", r.from)
		}
		s = strings.ReplaceAll(s, r.from, r.to)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	// -e: a failing command fails the run, as a reader would notice; the replicas the block starts
	// in the background are in bash's process group, which the test kills if the block does not
	// get to its own kill.
	cmd := exec.CommandContext(ctx, "bash", "-ec", s)
	cmd.Dir = t.TempDir() // the replicas' logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A block that fails part-way leaves the replicas running with bash's stdout: Wait stops
	// copying from it a moment after bash exits, and the group is killed below.
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the block left running
	if err != nil {
		t.Fatalf("the scaling-out block: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, `"contentJson": "{\"text\":\"hi from replica 2\"}"`) {
		t.Errorf("the pop on replica 2 did not answer the message sent through it:\n%s", out)
	}
	if !strings.Contains(out, `"name": "scaled"`) || strings.Count(out, "0c0ffee0-0000-4000-8000-000000000017") < 2 {
		t.Errorf("GetBranch on replica 2 did not answer the branch made on replica 1:\n%s", out)
	}
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
