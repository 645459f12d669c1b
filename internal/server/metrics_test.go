package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// metricValue returns the value of the series of family name whose labels include want, and
// whether it exists.
func metricValue(t *testing.T, m *Metrics, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range s.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(s.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestMetricsCountCalls: the gRPC server metrics count every call that reaches the chain by method
// and the code the client got, refused ones included, and every registered method has its series
// from the start (issue 7 "Metrics"). A call without a token is refused by the tap before the chain
// (issue 11 "auth before bytes") and counted in historyd_calls_refused_before_read_total instead.
func TestMetricsCountCalls(t *testing.T) {
	m := NewMetrics()
	ts := newTestServer(t, registerProbe, WithMetrics(m), WithAuthTokens(mustTokens(t, testToken)))
	labels := func(code codes.Code) map[string]string {
		return map[string]string{"grpc_service": probeService, "grpc_method": "Unary", "grpc_code": code.String()}
	}
	// A health check first: Serve, which creates the series, runs in newTestServer's goroutine.
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(t, m, "grpc_server_handled_total", labels(codes.OK)); !ok || v != 0 {
		t.Errorf("before any call: handled OK = %v (exists %v), want a 0 series", v, ok)
	}
	ctx := withToken(testContext(t), testToken)
	for range 3 {
		if err := callProbeUnary(ctx, ts.conn, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	_ = callProbeUnary(ctx, ts.conn, "field")
	_ = callProbeUnary(testContext(t), ts.conn, "ok") // no token
	for code, want := range map[codes.Code]float64{codes.OK: 3, codes.InvalidArgument: 1, codes.Unauthenticated: 0} {
		if v, _ := metricValue(t, m, "grpc_server_handled_total", labels(code)); v != want {
			t.Errorf("handled %v = %v, want %v", code, v, want)
		}
	}
	if v, _ := metricValue(t, m, "grpc_server_handling_seconds", map[string]string{"grpc_method": "Unary"}); v != 4 {
		t.Errorf("handling-time histogram count = %v, want 4", v)
	}
	if v, _ := metricValue(t, m, "historyd_calls_refused_before_read_total", map[string]string{"reason": "unauthenticated"}); v != 1 {
		t.Errorf("refused before read (unauthenticated) = %v, want 1", v)
	}
}

// blockingStream is a grpc.ServerStream for calling stream interceptors directly.
type blockingStream struct{ grpc.ServerStream }

func (blockingStream) Context() context.Context { return context.Background() }
func (blockingStream) SetHeader(metadata.MD) error {
	return nil
}

// TestStreamGauges: historyd_open_streams counts the streams open now, by method, and
// historyd_evicted_subscribers_total counts those that ended because their client was too slow
// (issue 7: gauges for watchers and evicted subscribers).
func TestStreamGauges(t *testing.T) {
	m := NewMetrics()
	intercept := m.streamGauges()
	info := &grpc.StreamServerInfo{FullMethod: "/historyd.v1.HistoryService/WatchBranch", IsServerStream: true}
	labels := map[string]string{"grpc_service": "historyd.v1.HistoryService", "grpc_method": "WatchBranch"}

	release := make(chan error)
	entered := make(chan struct{})
	done := make(chan error)
	for range 2 {
		go func() {
			done <- intercept(nil, blockingStream{}, info, func(any, grpc.ServerStream) error {
				entered <- struct{}{}
				return <-release
			})
		}()
		<-entered
	}
	if v, _ := metricValue(t, m, "historyd_open_streams", labels); v != 2 {
		t.Errorf("open streams with two handlers running = %v, want 2", v)
	}
	slow := tooSlow(errSendTimeout, nil)
	release <- slow
	if err := <-done; !errors.Is(err, errSlowConsumer) {
		t.Errorf("interceptor returned %v, want the handler's error", err)
	}
	release <- io.EOF
	<-done
	if v, _ := metricValue(t, m, "historyd_open_streams", labels); v != 0 {
		t.Errorf("open streams after both ended = %v, want 0", v)
	}
	if v, _ := metricValue(t, m, "historyd_evicted_subscribers_total", labels); v != 1 {
		t.Errorf("evicted subscribers = %v, want 1", v)
	}
}

// TestMetricsHandler: the handler serves the Prometheus text format with the runtime, gRPC and
// historyd metrics.
func TestMetricsHandler(t *testing.T) {
	m := NewMetrics()
	ts := newTestServer(t, registerProbe, WithMetrics(m))
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go_memstats_heap_alloc_bytes", "process_resident_memory_bytes",
		"grpc_server_handled_total{", `grpc_method="Unary"`,
		`historyd_open_streams{grpc_method="Stream",grpc_service="historyd.test.Probe"} 0`,
		`historyd_evicted_subscribers_total{grpc_method="Stream",grpc_service="historyd.test.Probe"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics page lacks %q", want)
		}
	}
}

// TestSplitMethod: full method names split into service and method.
func TestSplitMethod(t *testing.T) {
	for in, want := range map[string][2]string{
		"/historyd.v1.HistoryService/AddMessage": {"historyd.v1.HistoryService", "AddMessage"},
		"/a/b":                                   {"a", "b"},
		"nonsense":                               {"unknown", "nonsense"},
	} {
		if s, m := splitMethod(in); s != want[0] || m != want[1] {
			t.Errorf("splitMethod(%q) = %q, %q; want %q", in, s, m, want)
		}
	}
}
