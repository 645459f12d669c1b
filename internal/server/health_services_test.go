package server

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

// TestHealthPerService: HistoryService and ExchangeService have their own health statuses, SERVING
// once registered and NOT_SERVING with the whole server's at shutdown (issue 19: "Health has
// per-service statuses").
func TestHealthPerService(t *testing.T) {
	srv := New(nil)
	RegisterHistory(srv, store.NewMemory())
	ex := exchange.Memory()
	defer ex.Close()
	RegisterExchange(srv, ex)
	services := []string{"", historyv1.HistoryService_ServiceDesc.ServiceName, historyv1.ExchangeService_ServiceDesc.ServiceName}
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range services {
			resp, err := srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || resp.GetStatus() != want {
				t.Errorf("Check(%q) = %v, %v; want %v", name, resp.GetStatus(), err, want)
			}
		}
	}
	check(healthpb.HealthCheckResponse_SERVING)
	if services[1] != "historyd.v1.HistoryService" || services[2] != "historyd.v1.ExchangeService" {
		t.Errorf("service names %q, want the ones the README documents", services[1:])
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
}

// TestHealthCheckLoggedAtDebug: a probe's Health/Check writes its line at debug, so that probes
// every few seconds do not fill an info log; other calls stay at info (issue 19).
func TestHealthCheckLoggedAtDebug(t *testing.T) {
	ts := newTestServer(t, nil)
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	lines := ts.logs.FilterField(zap.String("grpc.service", "grpc.health.v1.Health")).All()
	if len(lines) != 1 {
		t.Fatalf("%d log lines for Health/Check, want 1: %v", len(lines), lines)
	}
	if lines[0].Level != zapcore.DebugLevel {
		t.Errorf("Health/Check logged at %v, want debug", lines[0].Level)
	}
}
