//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestGrpcurlList: with no proto files at hand, `grpcurl -plaintext ADDR list` lists the health
// and reflection services (issue 2 acceptance; docs/design.md#services).
func TestGrpcurlList(t *testing.T) {
	p := startServer(t)
	services := strings.Fields(grpcurl(t, "-plaintext", p.addr, "list"))
	for _, want := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		found := false
		for _, s := range services {
			found = found || s == want
		}
		if !found {
			t.Errorf("grpcurl list = %v, want it to include %s", services, want)
		}
	}
}

// TestGrpcurlHealthCheck: grpc.health.v1.Health/Check answers SERVING (issue 2).
func TestGrpcurlHealthCheck(t *testing.T) {
	p := startServer(t)
	out := grpcurl(t, "-plaintext", p.addr, "grpc.health.v1.Health/Check")
	var resp struct{ Status string }
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("grpcurl output %q: %v", out, err)
	}
	if resp.Status != "SERVING" {
		t.Errorf("Health/Check status = %q, want SERVING", resp.Status)
	}
}

// TestSignalCleanExit: SIGTERM and SIGINT end the process with exit code 0, well within the grace
// period when nothing is in flight, and the process is gone (issue 2 acceptance).
func TestSignalCleanExit(t *testing.T) {
	const grace = 5 * time.Second
	for name, sig := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT} {
		t.Run(name, func(t *testing.T) {
			p := startServer(t, "--grace-period", grace.String())
			grpcurl(t, "-plaintext", p.addr, "grpc.health.v1.Health/Check")
			code, elapsed := stop(t, p, sig, grace)
			if code != 0 {
				t.Errorf("exit code %d after %v, want 0; log:\n%s", code, sig, strings.Join(p.stderr.Lines(), "\n"))
			}
			if elapsed >= grace {
				t.Errorf("exit took %v, want less than the grace period %v", elapsed, grace)
			}
			lines := p.stderr.Lines()
			if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"stopped"`) {
				t.Errorf("last log line = %s, want the stopped line", last)
			}
		})
	}
}

// TestShutdownBoundedByGracePeriod: an open stream does not hold the process: on SIGTERM health
// goes NOT_SERVING first and health watchers are let go, then after the grace period a stream that
// nothing ends (a reflection stream) is cut and the process exits 0 (docs/development.md#style-lifecycle: NOT_SERVING first,
// GracefulStop bounded by a grace period, then Stop).
func TestShutdownBoundedByGracePeriod(t *testing.T) {
	const grace = time.Second
	p := startServer(t, "--grace-period", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn := dial(t, p)
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health/Watch: %v", err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch update = %v, %v; want SERVING", first, err)
	}
	idle := openIdleStream(ctx, t, conn)

	code, elapsed := stop(t, p, syscall.SIGTERM, grace+startTimeout)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if elapsed < grace || elapsed > grace+5*time.Second {
		t.Errorf("exit took %v, want about the grace period %v", elapsed, grace)
	}
	next, err := watch.Recv()
	if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("watch update after SIGTERM = %v, %v; want NOT_SERVING before the end", next, err)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("health watch ended with %v, want UNAVAILABLE: the server is shutting down", err)
	}
	if _, err := idle.Recv(); err == nil {
		t.Error("the reflection stream is still open after the process exited")
	}
	if log := strings.Join(p.stderr.Lines(), "\n"); !strings.Contains(log, "stopping forcibly") {
		t.Errorf("no forced-stop line in the log:\n%s", log)
	}
}

// TestShutdownEndsHealthWatch: health watchers (clients with client-side health checking hold one a
// connection) do not hold the graceful stop: with only those open, SIGTERM exits well inside the
// grace period and nothing is cut off.
func TestShutdownEndsHealthWatch(t *testing.T) {
	const grace = time.Minute
	p := startServer(t, "--grace-period", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	watch, err := healthpb.NewHealthClient(dial(t, p)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = watch.Recv()
	}
	if err != nil {
		t.Fatalf("Health/Watch: %v", err)
	}
	code, elapsed := stop(t, p, syscall.SIGTERM, startTimeout)
	if code != 0 || elapsed >= startTimeout {
		t.Errorf("exit code %d after %v, want 0 well inside the grace period %v", code, elapsed, grace)
	}
	if log := strings.Join(p.stderr.Lines(), "\n"); strings.Contains(log, "stopping forcibly") {
		t.Errorf("the shutdown had to cut RPCs off:\n%s", log)
	}
}

// openIdleStream opens a server reflection stream on conn and completes one exchange, so that its
// handler runs; no shutdown hook ends it, so it holds GracefulStop until Stop cuts it off.
func openIdleStream(ctx context.Context, t *testing.T, conn *grpc.ClientConn) reflectionpb.ServerReflection_ServerReflectionInfoClient {
	t.Helper()
	s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err == nil {
		err = s.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
		})
	}
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	return s
}

// TestSecondInstanceSameAddress: a second historyd on a taken address exits non-zero with exactly
// one log line naming the address, and the first keeps serving (issue 2 acceptance).
func TestSecondInstanceSameAddress(t *testing.T) {
	first := startServer(t)
	second := startProcess(t, "--listen", first.addr, "--log-format", "json")
	code, _ := wait(t, second, startTimeout)
	if code == 0 {
		t.Errorf("second instance exit code = 0, want non-zero")
	}
	lines := second.stderr.Lines()
	if len(lines) != 1 {
		t.Fatalf("second instance wrote %d lines, want exactly 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var entry struct{ Level, Msg, Error string }
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("line %q: %v", lines[0], err)
	}
	if entry.Level != "error" || !strings.Contains(entry.Msg, first.addr) {
		t.Errorf("line = %s, want an error whose message names %s", lines[0], first.addr)
	}
	waitServing(t, first)
}
