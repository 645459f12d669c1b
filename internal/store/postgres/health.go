package postgres

import (
	"context"
	"sync"
	"time"
)

// health is whether the Store can reach its database, and a channel
// closed at the next change (internal/server/health.go's storageHealth
// follows it): unusable from the start until the first connect, after a
// call loses its connection until the prober reaches the server again,
// and for good when the schema is refused.
type health struct {
	mu      sync.Mutex
	err     error // nil: usable
	refused bool
	changed chan struct{}
	broken  chan struct{} // cap 1: wakes the prober
}

func newHealth() *health {
	return &health{changed: make(chan struct{}), broken: make(chan struct{}, 1)}
}

// set records why the database is unusable (nil: usable again); a change
// of usability, or of the cause while unusable, closes changed.
func (h *health) set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused {
		return
	}
	was := h.err
	h.err = err
	if (was == nil) == (err == nil) && (err == nil || was.Error() == err.Error()) {
		return
	}
	close(h.changed)
	h.changed = make(chan struct{})
	if err != nil {
		select {
		case h.broken <- struct{}{}:
		default:
		}
	}
}

// refuse records an unusable database that no retry mends.
func (h *health) refuse(err error) {
	h.set(err)
	h.mu.Lock()
	h.refused = true
	h.mu.Unlock()
}

func (h *health) get() (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed, h.err
}

// Health returns a channel closed at the next change, and why the
// database is unusable (nil while it is usable).
func (s *Store) Health() (changed <-chan struct{}, unusable error) { return s.health.get() }

// runProber probes the server after a call lost its connection or met a
// standby, with backoff (100 ms doubling to 5 s), until a writable primary
// answers; then the Store is usable again. Owner: the Store; stopped by Close.
func (s *Store) runProber() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.health.broken:
		}
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			if !s.ready.Load() {
				break // the connector reaches the server first
			}
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			// A writable primary: after a failover the old address may
			// answer as a standby (25006), which serves no write.
			var primary bool
			err := s.pool.QueryRow(ctx, "SELECT NOT pg_is_in_recovery()").Scan(&primary)
			cancel()
			if err == nil && primary {
				s.health.set(nil)
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}
