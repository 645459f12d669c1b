package server

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in these tests, so that a bug fails the test instead of hanging it.
const testTimeout = 10 * time.Second

// testServer is a Server served over an in-memory bufconn listener, with a client connection to it
// and every log entry the server wrote.
type testServer struct {
	*Server
	conn *grpc.ClientConn
	logs *observer.ObservedLogs
	lis  *bufconn.Listener // for tests that need a second client connection (see dial)

	served chan error // receives Serve's result once Serve returns
}

// newTestServer starts a Server built by New (so with the production interceptor chain) on a
// bufconn listener and returns it with a connected client. register, when not nil, registers
// services on the *grpc.Server before Serve. Cleanup closes the client, shuts the server down and
// waits for Serve to return. Every test that needs a running server uses this helper.
func newTestServer(t *testing.T, register func(*grpc.Server), opts ...Option) *testServer {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	srv := New(zap.New(core), opts...)
	if register != nil {
		register(srv.GRPCServer())
	}
	lis := bufconn.Listen(1 << 20)
	ts := &testServer{Server: srv, logs: logs, lis: lis, served: make(chan error, 1)}
	go func() { ts.served <- srv.Serve(lis) }()

	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return lis.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	ts.conn = conn
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Errorf("closing the client: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx) // tests that care about its result call it themselves
		select {
		case err := <-ts.served:
			if err != nil {
				t.Errorf("Serve returned %v after Shutdown, want nil", err)
			}
		case <-ctx.Done():
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return ts
}

// dial opens another client connection to ts with extra dial options (for example a small flow
// control window), closed at the end of the test.
func (ts *testServer) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ts.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestHealthServing: the overall health status is SERVING while the server runs (
// docs/design.md#services: grpc.health.v1.Health is registered).
func TestHealthServing(t *testing.T) {
	ts := newTestServer(t, nil)
	resp, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health/Check: %v", err)
	}
	if got := resp.GetStatus(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Health/Check status = %v, want SERVING", got)
	}
}

// TestReflectionListsServices: server reflection (v1 and v1alpha) is registered, so that
// `grpcurl -plaintext ADDR list` works with no proto files at hand (docs/design.md#services).
func TestReflectionListsServices(t *testing.T) {
	ts := newTestServer(t, nil)
	stream, resp := listServices(testContext(t), t, ts)
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want it to include %s", names, want)
		}
	}
}

// watchHealth opens a grpc.health.v1 Watch on the overall status and returns its stream after the
// first (SERVING) update has arrived.
func watchHealth(ctx context.Context, t *testing.T, ts *testServer) healthpb.Health_WatchClient {
	t.Helper()
	w, err := healthpb.NewHealthClient(ts.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health/Watch: %v", err)
	}
	first, err := w.Recv()
	if err != nil {
		t.Fatalf("Health/Watch first Recv: %v", err)
	}
	if first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Watch first status = %v, want SERVING", first.GetStatus())
	}
	return w
}

// openIdleStream opens a server reflection stream and completes one exchange on it, so that its
// handler is running; nothing on the server ends it, so it holds GracefulStop open until the client
// leaves or Stop cuts it off. (Health/Watch streams no longer serve: Shutdown ends them.)
func openIdleStream(ctx context.Context, t *testing.T, ts *testServer) reflectionpb.ServerReflection_ServerReflectionInfoClient {
	t.Helper()
	s, _ := listServices(ctx, t, ts)
	return s
}

// listServices opens a server reflection stream and asks it for the services once, returning the
// stream, still open, and the answer.
func listServices(ctx context.Context, t *testing.T, ts *testServer) (reflectionpb.ServerReflection_ServerReflectionInfoClient, *reflectionpb.ServerReflectionResponse) {
	t.Helper()
	s, err := reflectionpb.NewServerReflectionClient(ts.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	req := &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
	}
	if err := s.Send(req); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return s, resp
}

// TestShutdownClean: with nothing in flight Shutdown ends within the grace period and returns nil,
// and Serve returns nil (docs/development.md#style-lifecycle).
func TestShutdownClean(t *testing.T) {
	ts := newTestServer(t, nil, WithGracePeriod(testTimeout))
	if _, err := healthpb.NewHealthClient(ts.conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Health/Check: %v", err)
	}
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown = %v, want nil", err)
	}
}

// TestShutdownOrder: health goes NOT_SERVING first, then the OnShutdown hooks run (in the order
// they were added), then GracefulStop; a hook that ends an open stream lets GracefulStop finish
// without waiting out the grace period.
func TestShutdownOrder(t *testing.T) {
	ts := newTestServer(t, nil, WithGracePeriod(testTimeout))
	watchCtx, endWatch := context.WithCancel(testContext(t))
	defer endWatch()
	w := watchHealth(watchCtx, t, ts)

	// The watcher must see NOT_SERVING before any hook runs.
	notServing := make(chan error, 1)
	go func() {
		resp, err := w.Recv()
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			err = errors.New("status " + resp.GetStatus().String())
		}
		notServing <- err
	}()
	var order []string
	ts.OnShutdown(func() {
		if err := <-notServing; err != nil {
			t.Errorf("before the first hook, the health watcher got %v, want NOT_SERVING", err)
		}
		order = append(order, "first")
	})
	ts.OnShutdown(func() {
		order = append(order, "second")
		endWatch() // the owner of the stream ends it, as watch loops will
	})

	start := time.Now()
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown = %v, want nil: the hook ended the only stream", err)
	}
	if !slices.Equal(order, []string{"first", "second"}) {
		t.Errorf("hooks ran as %v, want [first second]", order)
	}
	if elapsed := time.Since(start); elapsed >= testTimeout {
		t.Errorf("Shutdown took %v, the whole grace period", elapsed)
	}
}

// TestShutdownForcedAfterGracePeriod: a stream that nobody ends does not block shutdown beyond the
// grace period: Stop cuts it off and Shutdown reports ErrForcedStop (docs/development.md#style-lifecycle: GracefulStop bounded
// by a grace period, then Stop).
func TestShutdownForcedAfterGracePeriod(t *testing.T) {
	const grace = 50 * time.Millisecond
	ts := newTestServer(t, nil, WithGracePeriod(grace))
	s := openIdleStream(testContext(t), t, ts)

	start := time.Now()
	err := ts.Shutdown(testContext(t))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrForcedStop) {
		t.Errorf("Shutdown = %v, want ErrForcedStop", err)
	}
	if elapsed < grace || elapsed >= testTimeout {
		t.Errorf("Shutdown took %v, want the grace period (%v) and not much more", elapsed, grace)
	}
	// The stream was cut.
	if _, err := s.Recv(); err == nil {
		t.Error("the idle stream is still open after a forced stop")
	} else if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
		t.Errorf("cut stream ended with %v, want UNAVAILABLE", err)
	}
	if n := ts.logs.FilterMessageSnippet("stopping forcibly").Len(); n != 1 {
		t.Errorf("%d 'stopping forcibly' log lines, want 1", n)
	}
}

// TestShutdownContextEndsEarly: a caller's context that ends before the grace period forces the
// stop at once.
func TestShutdownContextEndsEarly(t *testing.T) {
	ts := newTestServer(t, nil, WithGracePeriod(time.Hour))
	openIdleStream(testContext(t), t, ts)
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, ErrForcedStop) {
		t.Errorf("Shutdown with an ended context = %v, want ErrForcedStop", err)
	}
}

// TestNewNilLogger: a nil logger becomes zap.NewNop() (docs/development.md#style-shape).
func TestNewNilLogger(t *testing.T) {
	s := New(nil)
	if s.logger == nil {
		t.Fatal("New(nil) kept a nil logger")
	}
	if err := s.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown of a server never served = %v, want nil", err)
	}
}

// TestWithGracePeriod: the default is DefaultGracePeriod, and a negative period means zero.
func TestWithGracePeriod(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"default", nil, DefaultGracePeriod},
		{"set", []Option{WithGracePeriod(3 * time.Second)}, 3 * time.Second},
		{"negative", []Option{WithGracePeriod(-time.Second)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil, tc.opts...)
			if s.gracePeriod != tc.want {
				t.Errorf("grace period = %v, want %v", s.gracePeriod, tc.want)
			}
			_ = s.Shutdown(testContext(t)) // releases the server; a zero period may report a forced stop
		})
	}
}
