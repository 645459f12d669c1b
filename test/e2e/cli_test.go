//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runCLI runs the built historyd with args and env (added to the test's environment) to its end
// and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, historydBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("historyd %q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestCLIDiscoverable: the acceptance of issue 19 for the command line, on the binary make build
// ships: help on stdout naming healthcheck, version, one-line usage errors with a valid example,
// --listen's port checked at parse time.
func TestCLIDiscoverable(t *testing.T) {
	code, out, _ := runCLI(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "healthcheck") || !strings.Contains(out, "--grace-period") {
		t.Errorf("historyd --help: exit %d, stdout %q; want 0 and the help on stdout", code, out)
	}
	code, out, _ = runCLI(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "historyd ") || !strings.Contains(out, "\ncommit: ") || !strings.Contains(out, "\ngo: go") {
		t.Errorf("historyd version: exit %d, stdout %q", code, out)
	}
	if strings.Contains(out, "commit: unknown") {
		t.Errorf("historyd version %q: make build stamps the commit", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grace-period", "10"}, "10s"},
		{[]string{"--listen", "127.0.0.1:99999"}, "99999"},
		{[]string{"healthcheck", "--addr", "bogus"}, "127.0.0.1:50051"},
	} {
		code, out, errOut := runCLI(t, nil, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || out != "" {
			t.Errorf("historyd %q: exit %d, stderr %q; want 2 and one line containing %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestCLIHealthcheckFollowsHISTORYD_LISTEN: healthcheck checks the port of HISTORYD_LISTEN, with a
// wildcard host on loopback, and each service has its own status (issue 19).
func TestCLIHealthcheckFollowsHISTORYD_LISTEN(t *testing.T) {
	p := startServer(t)
	_, port, _ := net.SplitHostPort(p.addr)
	for _, listen := range []string{p.addr, "0.0.0.0:" + port, ":" + port} {
		code, out, errOut := runCLI(t, []string{"HISTORYD_LISTEN=" + listen}, "healthcheck")
		if code != 0 || out != "SERVING\n" {
			t.Errorf("HISTORYD_LISTEN=%s historyd healthcheck: exit %d, %q %q; want 0 SERVING", listen, code, out, errOut)
		}
	}
	for _, svc := range []string{"historyd.v1.HistoryService", "historyd.v1.ExchangeService"} {
		code, out, _ := runCLI(t, []string{"HISTORYD_LISTEN=" + p.addr}, "healthcheck", "--service", svc)
		if code != 0 || out != "SERVING\n" {
			t.Errorf("healthcheck --service %s: exit %d, %q; want 0 SERVING", svc, code, out)
		}
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	if code, out, _ := runCLI(t, []string{"HISTORYD_LISTEN=" + deadAddr}, "healthcheck", "--timeout", "2s"); code != 1 {
		t.Errorf("HISTORYD_LISTEN=%s (nothing there) historyd healthcheck: exit %d, %q; want 1", deadAddr, code, out)
	}
	if code, _, errOut := runCLI(t, []string{"HISTORYD_LISTEN=0.0.0.0:0"}, "healthcheck"); code != 2 || !strings.Contains(errOut, "port 0") {
		t.Errorf("HISTORYD_LISTEN=0.0.0.0:0 historyd healthcheck: exit %d, %q; want 2 saying port 0", code, errOut)
	}
}
