package server

import (
	"errors"
	"net/http"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// metricsNamespace prefixes historyd's own metrics (the gRPC ones keep their grpc_server_ names,
// which dashboards know).
const metricsNamespace = "historyd"

// Metrics is the server's Prometheus registry: the Go runtime and process collectors, the gRPC
// server metrics of go-grpc-middleware (calls started and handled by method and code, messages
// streamed, handling-time histograms), historyd's stream gauges, and the collectors of the domain
// (see WatchStore and WatchExchange). The domain packages know nothing of Prometheus: their
// collectors read a snapshot (Stats) at scrape time.
type Metrics struct {
	reg     *prometheus.Registry
	grpc    *grpcprom.ServerMetrics
	streams *prometheus.GaugeVec
	evicted *prometheus.CounterVec

	// Bounds of issue 11 (tap.go, connlimit.go, inflight_budget.go).
	refusedEarly  *prometheus.CounterVec
	inflightBytes prometheus.Gauge
	connsOpen     prometheus.Gauge
	connsRefused  prometheus.Counter
}

// NewMetrics returns a registry with the runtime, process, gRPC and stream metrics registered.
// Pass it to New with WithMetrics and serve Handler on a separate listener.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "open_streams",
			Help:      "Server streams open now (authenticated), by method: WatchBranch streams are the branch watchers, SubscribeInbox streams the inbox subscribers.",
		}, []string{"grpc_service", "grpc_method"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "evicted_subscribers_total",
			Help:      "Server streams ended with RESOURCE_EXHAUSTED (SUBSCRIBER_TOO_SLOW) because the client did not keep up, by method.",
		}, []string{"grpc_service", "grpc_method"}),
		refusedEarly: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "calls_refused_before_read_total",
			Help:      "Calls refused from their headers, before their body was read, by reason: unauthenticated (no valid bearer token) or inflight_budget (--max-inflight-bytes reserved by calls in progress).",
		}, []string{"reason"}),
		inflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "inflight_request_bytes",
			Help:      "Request bytes reserved now by calls in progress (each reserves --max-recv-msg-size), against --max-inflight-bytes.",
		}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "connections_open",
			Help:      "Client connections open now, against --max-connections.",
		}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "connections_refused_total",
			Help:      "Client connections closed at once because --max-connections were open.",
		}),
	}
	for _, reason := range []string{"unauthenticated", "inflight_budget"} {
		m.refusedEarly.WithLabelValues(reason) // a 0 series from the start
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, m.streams, m.evicted,
		m.refusedEarly, m.inflightBytes, m.connsOpen, m.connsRefused,
	)
	return m
}

// Handler serves the metrics in the Prometheus text format (or OpenMetrics, when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Register adds a collector to the registry; it fails when one of its metrics is registered
// already.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// WithMetrics records the gRPC server metrics and historyd's stream metrics in m. The default, and
// a nil m, records none.
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.metrics = m }
}

// initialize creates the zero-valued series of every method registered on gs (and of the stream
// metrics of every server-streaming method), so that dashboards and alerts see a 0 rather than no
// data; Serve calls it once the services are registered.
func (m *Metrics) initialize(gs *grpc.Server) {
	m.grpc.InitializeMetrics(gs)
	for service, info := range gs.GetServiceInfo() {
		for _, method := range info.Methods {
			if method.IsServerStream {
				m.streams.WithLabelValues(service, method.Name)
				m.evicted.WithLabelValues(service, method.Name)
			}
		}
	}
}

// unaryInterceptor returns the outermost metrics interceptor for unary calls.
func (m *Metrics) unaryInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor()
}

// streamInterceptor returns the outermost metrics interceptor for streams.
func (m *Metrics) streamInterceptor() grpc.StreamServerInterceptor {
	return m.grpc.StreamServerInterceptor()
}

// streamGauges returns the stream interceptor that keeps historyd_open_streams and
// historyd_evicted_subscribers_total. It sits inside auth, so only authenticated streams count,
// and outside the status mapping's reach, so it sees the handler's own error.
func (m *Metrics) streamGauges() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		service, method := splitMethod(info.FullMethod)
		open := m.streams.WithLabelValues(service, method)
		open.Inc()
		defer open.Dec()
		err := handler(srv, ss)
		if errors.Is(err, errSlowConsumer) {
			m.evicted.WithLabelValues(service, method).Inc()
		}
		return err
	}
}

// splitMethod splits "/pkg.Service/Method" into its service and method.
func splitMethod(fullMethod string) (string, string) {
	for i := len(fullMethod) - 1; i > 0; i-- {
		if fullMethod[i] == '/' {
			return fullMethod[1:i], fullMethod[i+1:]
		}
	}
	return "unknown", fullMethod
}

// refusedBeforeRead counts a call the tap refused, for reason; a nil m counts nothing.
func (m *Metrics) refusedBeforeRead(reason string) {
	if m != nil {
		m.refusedEarly.WithLabelValues(reason).Inc()
	}
}

// inflightChanged adds delta to the reserved in-flight bytes; a nil m does nothing.
func (m *Metrics) inflightChanged(delta int64) {
	if m != nil {
		m.inflightBytes.Add(float64(delta))
	}
}

// connectionOpened adds delta (1 or -1) to the open connections; a nil m does nothing.
func (m *Metrics) connectionOpened(delta int) {
	if m != nil {
		m.connsOpen.Add(float64(delta))
	}
}

// connectionRefused counts a connection closed past the cap; a nil m counts nothing.
func (m *Metrics) connectionRefused() {
	if m != nil {
		m.connsRefused.Inc()
	}
}
