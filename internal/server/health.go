package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/historyd/historyd/internal/store"
)

// healthServer is grpc-go's health server with two changes: a request is held to the limits of
// health_limits.go (its service name's length, the anonymous Watch streams' number, the end of its
// body deadline), and Watch streams end when the server shuts down. health.Server.Shutdown only sends NOT_SERVING to its watchers and leaves their streams
// open, so GracefulStop would wait out the whole grace period for them, and every client that uses
// client-side health checking holds one such stream per connection. A watcher is told NOT_SERVING
// first, then its stream ends with UNAVAILABLE, reason SERVER_SHUTTING_DOWN, like the watch and
// inbox streams.
type healthServer struct {
	*health.Server

	stopOnce sync.Once
	// stopping ends at shutdown. A context rather than a channel, so that each Watch can tie its
	// own context to it with context.AfterFunc and no goroutine per stream.
	stopping context.Context
	stop     context.CancelFunc

	anonymousWatches watchSlots // the Watch streams opened without a valid token
}

// newHealthServer returns the health server, with at most maxAnonymousWatches Watch streams open
// without a valid token.
func newHealthServer(maxAnonymousWatches int) *healthServer {
	stopping, stop := context.WithCancel(context.Background())
	h := &healthServer{Server: health.NewServer(), stopping: stopping, stop: stop}
	h.anonymousWatches.limit = int64(maxAnonymousWatches)
	return h
}

// Check is health.Server.Check for a request within the limits.
func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	requestRead(ctx)
	if err := checkServiceName(req.GetService()); err != nil {
		return nil, err
	}
	return h.Server.Check(ctx, req)
}

// List is health.Server.List, once its request is read.
func (h *healthServer) List(ctx context.Context, req *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	requestRead(ctx)
	return h.Server.List(ctx, req)
}

// shutdown sets every status to NOT_SERVING and ends the open Watch streams. Safe to call more
// than once.
func (h *healthServer) shutdown() {
	h.stopOnce.Do(func() {
		h.Server.Shutdown()
		h.stop()
	})
}

// Watch runs health.Server.Watch with a context that also ends at shutdown. The inner Watch may
// see that end before the NOT_SERVING update that shutdown queued for it (it selects over both),
// so Watch sends NOT_SERVING itself when the last status sent was anything else.
func (h *healthServer) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	requestRead(stream.Context())
	if err := checkServiceName(req.GetService()); err != nil {
		return err // before health.Server keeps the name for the stream's life
	}
	if h.stopping.Err() != nil {
		return errShuttingDown
	}
	if hc := healthCallFrom(stream.Context()); hc == nil || hc.anonymous {
		if err := h.anonymousWatches.take(); err != nil {
			return err
		}
		defer h.anonymousWatches.give()
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.stopping, cancel)()

	ws := &healthWatchStream{Health_WatchServer: stream, ctx: ctx}
	err := h.Server.Watch(req, ws)
	if h.stopping.Err() == nil || stream.Context().Err() != nil {
		return err // the client left, or a send failed: not a shutdown
	}
	if !ws.sent || ws.last != healthpb.HealthCheckResponse_NOT_SERVING {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
			return err
		}
	}
	return errShuttingDown
}

// healthWatchStream gives the inner Watch the shutdown-aware context and records the last status
// it sent. Only the inner Watch's goroutine uses it, and Watch reads it after that returns.
type healthWatchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	sent bool
	last healthpb.HealthCheckResponse_ServingStatus
}

func (s *healthWatchStream) Context() context.Context { return s.ctx }

func (s *healthWatchStream) Send(m *healthpb.HealthCheckResponse) error {
	if err := s.Health_WatchServer.Send(m); err != nil {
		return err
	}
	s.sent, s.last = true, m.GetStatus()
	return nil
}

// StorageHealth is implemented by a store whose storage can become unusable (the sqlite engine:
// an I/O error or a damaged file; a full disk is not unusable, reads go on; the PostgreSQL engine:
// the server unreachable).
type StorageHealth interface {
	// Health returns a channel closed at the next change, and why the storage is unusable (nil
	// while it is usable).
	Health() (changed <-chan struct{}, unusable error)
}

// storageHealth is StorageHealth under the name RegisterHistory checks for.
type storageHealth = StorageHealth

// FollowStorage makes each of services follow st's storage health as HistoryService follows its
// store's (RegisterHistory): NOT_SERVING while the storage is unusable, SERVING while it is usable,
// NOT_SERVING for good from shutdown. It is for the services whose calls read or write that storage
// too: the ExchangeService when the Exchange lives in the store's database, the AdminService whose
// Backup copies it. Call it after registering them (their registration sets them SERVING) and
// before Serve. One store is followed, and its changes logged, once however many services follow
// it; st is told apart from other stores with ==, so pass the store itself (a pointer).
func (s *Server) FollowStorage(st StorageHealth, services ...string) {
	for _, service := range services {
		s.followStorage(st, service)
	}
}

// storageFollower is the goroutine that sets the overall status and its services' to st's
// storage health (followStorage), and logs the changes, until shutdown.
type storageFollower struct {
	st StorageHealth

	// mu orders a service's joining with the goroutine's updates, so that a service added while
	// the storage is unusable is never left SERVING.
	mu       sync.Mutex
	services []string
}

// followStorage keeps the overall status and service's at NOT_SERVING while st's storage is
// unusable and SERVING while it is usable (issue 15: "the engine's health joins the health
// service"), and logs the changes (storageLog), until shutdown, which sets every status NOT_SERVING
// for good (health.Server ignores later changes). The first call for st starts its follower; later
// ones add service to it.
func (s *Server) followStorage(st StorageHealth, service string) {
	s.mu.Lock()
	var f *storageFollower
	for _, g := range s.followers {
		if g.st == st {
			f = g
		}
	}
	started := f != nil
	if !started {
		f = &storageFollower{st: st}
		s.followers = append(s.followers, f)
	}
	s.mu.Unlock()

	f.mu.Lock()
	f.services = append(f.services, service)
	// A store unusable from the start (issue 16: PostgreSQL unreachable, historyd serving and
	// retrying) is NOT_SERVING from the first Check, not once the goroutine below has first run:
	// the overall status starts SERVING, and registration has just set the service's SERVING.
	if _, unusable := st.Health(); unusable != nil {
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		s.health.SetServingStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	f.mu.Unlock()
	if !started {
		go s.runStorageFollower(f)
	}
}

// runStorageFollower is f's goroutine: it ends at shutdown.
func (s *Server) runStorageFollower(f *storageFollower) {
	log := &storageLog{logger: s.logger, every: storageLogEvery, now: time.Now}
	// recheck fires when a change to unusable was not logged (the rate limit): if the storage
	// is still unusable then, that is logged, so the log never ends on "usable again" while
	// the health is NOT_SERVING.
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	for {
		f.mu.Lock()
		changed, unusable := f.st.Health()
		status := healthpb.HealthCheckResponse_SERVING
		if unusable != nil {
			status = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if wait := log.observe(unusable); wait > 0 {
			recheck.Reset(wait)
		}
		s.health.SetServingStatus("", status)
		for _, service := range f.services {
			s.health.SetServingStatus(service, status)
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-recheck.C:
		case <-s.health.stopping.Done():
			return
		}
	}
}

// storageLogEvery is how often at most the storage's health logs that it became unusable.
const storageLogEvery = time.Minute

// storageLog logs the storage's health changes, the change to unusable at most once per every: an
// I/O error that the next commit clears can flip the health at the request rate, and a line per
// flip would flood the log. The flips not logged are counted in the next line; a storage still
// unusable when the window ends is logged then; damage (store.ErrStorageDamaged, which lasts until
// restart) is always logged. Only followStorage's goroutine uses it.
type storageLog struct {
	logger  *zap.Logger
	every   time.Duration
	now     func() time.Time
	last    time.Time // when the last "unusable" line was logged
	down    bool      // the last line logged said unusable
	damaged bool      // the damage has been logged
	missed  int       // changes to unusable since then, not logged
}

// observe logs what the storage's state unusable (nil: usable) changes in the log's account, and
// returns how long to wait before observing again when a change to unusable went unlogged (0:
// no need).
func (l *storageLog) observe(unusable error) time.Duration {
	if unusable == nil {
		if l.down {
			l.logger.Info("the database is usable again: health is SERVING")
			l.down = false
		}
		return 0
	}
	damaged := errors.Is(unusable, store.ErrStorageDamaged)
	if l.down && (l.damaged || !damaged) {
		return 0 // already logged as unusable, and no news
	}
	t := l.now()
	if !damaged && !l.last.IsZero() && t.Sub(l.last) < l.every {
		l.missed++
		return l.every - t.Sub(l.last)
	}
	fields := []zap.Field{zap.Error(unusable), zap.Int("unlogged_failures", l.missed)}
	if ce, ok := errors.AsType[causeError](unusable); ok && ce.LogCause() != nil {
		fields = append(fields, zap.NamedError("cause", ce.LogCause()))
	}
	l.logger.Error("the database is unusable: health is NOT_SERVING", fields...)
	l.last, l.down, l.damaged, l.missed = t, true, damaged, 0
	return 0
}
