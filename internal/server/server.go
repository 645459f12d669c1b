package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ErrForcedStop is returned by Shutdown when RPCs or streams were still open at the end of the
// grace period (or when the caller's context ended first) and the server had to be stopped
// forcibly, cutting them off.
var ErrForcedStop = errors.New("server: grace period ended before in-flight RPCs finished; stopped forcibly")

// Server is historyd's gRPC server: the *grpc.Server with the production interceptor chain, the
// grpc.health.v1 service and server reflection registered, and an orderly shutdown. Later issues
// register their services on GRPCServer before Serve is called.
type Server struct {
	logger      *zap.Logger
	gracePeriod time.Duration
	grpc        *grpc.Server
	health      *healthServer
	metrics     *Metrics // nil without WithMetrics
	inflight    *inflight
	tap         *callTap
	streams     *openStreams
	unwatch     func() // stops streams listening to credential reloads
	limits      Limits // with defaults in place of zeros; RegisterHistory reads the byte bounds

	mu        sync.Mutex
	hooks     []func()
	followers []*storageFollower // the stores whose health the statuses follow (health.go)
}

// New builds a Server that logs to logger (nil means zap.NewNop()). The server is not listening
// until Serve is called.
func New(logger *zap.Logger, opts ...Option) *Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.inflight = newInflight()
	o.logger = logger
	o.limits = o.limits.orDefaults()
	per := int64(o.limits.MaxRecvMsgSize)
	o.tap = &callTap{
		tokens:  o.tokens,
		budget:  newInflightBudget(o.limits.MaxInflightBytes, per, flagMaxInflightBytes, o.metrics.inflightChanged),
		health:  newInflightBudget(healthInflightCalls*per, per, flagMaxRecvMsgSize, nil),
		metrics: o.metrics,

		bodyTimeout: o.limits.RequestBodyTimeout,
		idleTimeout: o.limits.StreamIdleTimeout,
	}
	var unwatch func()
	o.streams, unwatch = newOpenStreams(o.tokens, o.tls)
	unary, stream := interceptorChain(logger, o)
	gs := grpc.NewServer(append(serverOptions(o, unary, stream), grpc.StatsHandler(&unchainedLogger{logger: logger}))...)
	registerTestHooks(gs) // only in binaries built with the historyd_testhook tag
	// The overall service "" starts SERVING; Watch streams without a token are at most one per
	// connection allowed (health_limits.go).
	hs := newHealthServer(o.limits.MaxConnections)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs) // grpc.reflection.v1 and v1alpha
	return &Server{
		logger:      logger,
		gracePeriod: o.gracePeriod,
		grpc:        gs,
		health:      hs,
		metrics:     o.metrics,
		inflight:    o.inflight,
		limits:      o.limits,
		tap:         o.tap,
		streams:     o.streams,
		unwatch:     unwatch,
	}
}

// GRPCServer returns the underlying *grpc.Server so that services can be registered on it. Register
// services before calling Serve.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// Health returns the grpc.health.v1 server, so that a registered service can publish its own
// serving status. Shutdown sets every status to NOT_SERVING and ends the open Health/Watch streams.
func (s *Server) Health() *health.Server { return s.health.Server }

// OnShutdown adds f to the hooks that Shutdown runs, in the order they were added, after health has
// gone NOT_SERVING and before GracefulStop; a hook ends the long-lived streams it owns (watch and
// inbox streams) so that GracefulStop does not wait the whole grace period for them. A hook must
// not block for long and must not call Shutdown.
func (s *Server) OnShutdown(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

// Serve accepts connections on lis until Shutdown is called, and then returns nil; any other
// return is a serving failure. Serve takes ownership of lis and closes it. At most
// Limits.MaxConnections connections are open at once; those past it are closed as they come
// (connlimit.go).
func (s *Server) Serve(lis net.Listener) error {
	if s.metrics != nil {
		s.metrics.initialize(s.grpc)
	}
	s.tap.learnMethods(s.grpc)
	err := s.grpc.Serve(limitConnections(lis, s.limits.MaxConnections, s.metrics))
	if errors.Is(err, grpc.ErrServerStopped) {
		// Shutdown ran before Serve started (a stop signal right after start): grpc closed lis,
		// and the server stopped as asked.
		return nil
	}
	return err
}

// Shutdown stops the server in order: every health status becomes NOT_SERVING (so load balancers
// and watchers stop sending new work) and Health/Watch streams end, the OnShutdown hooks run, then GracefulStop lets in-flight
// RPCs finish for at most the grace period, after which Stop cuts off whatever is left. It returns
// nil when everything finished in time and ErrForcedStop otherwise; ctx ending early also forces
// the stop. Shutdown returns only after the server has fully stopped, and is safe to call more than
// once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.shutdown()
	s.unwatch()

	s.mu.Lock()
	hooks := s.hooks
	s.hooks = nil // a second Shutdown does not run them again
	s.mu.Unlock()
	for _, hook := range hooks {
		hook()
	}

	// Owned by Shutdown: it ends when GracefulStop returns, which Stop below forces, and every path
	// out of this function waits for it.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.grpc.GracefulStop()
	}()

	timer := time.NewTimer(s.gracePeriod)
	defer timer.Stop()
	if s.waitStopped(ctx, stopped, timer.C) {
		return nil
	}
	s.grpc.Stop()
	<-stopped
	return ErrForcedStop
}

// flushWindow is how long Shutdown lets GracefulStop deliver what finished handlers wrote (last
// frames, trailers) once none is running: a client that is reading takes a moment; one that stopped
// reading, and holds the bytes behind HTTP/2 flow control, would hold GracefulStop for the whole
// grace period.
const flushWindow = 500 * time.Millisecond

// waitStopped waits for GracefulStop (stopped) and reports whether it finished; false means stop
// forcibly, logged with the reason: the grace period ended (graceEnd), ctx ended, or every handler
// had returned and clients still had not read what they wrote within the flush window.
func (s *Server) waitStopped(ctx context.Context, stopped <-chan struct{}, graceEnd <-chan time.Time) bool {
	var flush <-chan time.Time
	for {
		idle := s.inflight.whenIdle()
		if flush != nil {
			idle = nil // the flush window is running
		}
		select {
		case <-stopped:
			return true
		case <-idle:
			flush = time.After(flushWindow)
		case <-flush:
			if n := s.inflight.running(); n > 0 { // a call started meanwhile: wait for it
				flush = nil
				continue
			}
			select {
			case <-stopped:
				return true
			default:
			}
			s.logger.Warn("every call has returned, but clients have not read their last frames; stopping forcibly",
				zap.Duration("flush_window", flushWindow))
			return false
		case <-graceEnd:
			select {
			case <-stopped: // finished just as the period ended
				return true
			default:
			}
			s.logger.Warn("grace period ended with RPCs still open; stopping forcibly",
				zap.Duration("grace_period", s.gracePeriod))
			return false
		case <-ctx.Done():
			s.logger.Warn("shutdown context ended with RPCs still open; stopping forcibly",
				zap.Error(ctx.Err()))
			return false
		}
	}
}
