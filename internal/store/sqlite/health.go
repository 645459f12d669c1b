package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/historyd/historyd/internal/store"
)

// Issue 15: "the engine's health joins the health service (NOT_SERVING when
// the database is unusable)". An I/O error makes the database unusable
// until a probe (a read and a write) succeeds again, or a write commits; a
// damaged page or row keeps it unusable until restart (a probe reads and
// writes page 1 and a commit touches other pages: neither shows the damage
// gone, and clearing on them made health flap at the request rate); a full
// disk does not make it unusable: reads go on, and space freed lets writes
// resume.

// DefaultProbeInterval is how often an unusable database is probed.
const DefaultProbeInterval = 5 * time.Second

// health is whether the database is usable, and a channel closed at the
// next change.
type health struct {
	mu      sync.Mutex
	err     error // nil: usable
	damaged bool  // err is damage: only a restart clears it
	changed chan struct{}
	broken  chan struct{} // cap 1: wakes the prober when the database becomes unusable
}

func newHealth() *health {
	return &health{changed: make(chan struct{}), broken: make(chan struct{}, 1)}
}

// set records an I/O error (nil: usable again); a change of usability
// closes changed. It changes nothing once the database is damaged.
func (h *health) set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.damaged {
		return
	}
	h.change(err)
}

// damage records damage: the database stays unusable until restart.
func (h *health) damage(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.damaged {
		return
	}
	h.damaged = true
	if h.err != nil {
		// Unusable already (an I/O error): usability does not change, but
		// the cause does, and the damage lasts; the followers are told.
		h.err = err
		close(h.changed)
		h.changed = make(chan struct{})
		return
	}
	h.change(err)
}

// change records err, closing changed when usability changes (h.mu held).
func (h *health) change(err error) {
	was := h.err == nil
	h.err = err
	if was == (err == nil) {
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

func (h *health) isDamaged() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.damaged
}

func (h *health) get() (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed, h.err
}

// Health returns a channel closed at the next change, and why the
// database is unusable (nil while it is usable).
func (s *Store) Health() (changed <-chan struct{}, unusable error) { return s.health.get() }

// fault sorts err: a storage fault becomes a *StorageError naming the
// file; an I/O error marks the database unusable until the next commit or
// probe, damage until restart.
func (s *Store) fault(err error) error {
	class := storageClass(err)
	if class == nil {
		return err
	}
	var se *StorageError
	if errors.As(err, &se) {
		return err
	}
	se = &StorageError{File: s.db.Path, MaxBytes: s.db.maxBytes, Err: class, Cause: err, AtCommit: errors.As(err, new(commitError))}
	switch class {
	case store.ErrStorageUnavailable:
		s.health.set(se)
	case store.ErrStorageDamaged:
		s.health.damage(se)
	}
	return se
}

// Probe reads and writes the database once: the first page through a read
// connection, and the header's user_version rewritten unchanged through
// the writer (a real page write and commit). Success marks the database
// usable; a storage fault marks it unusable.
func (s *Store) Probe(ctx context.Context) error {
	err := s.read(ctx, func(tx *sql.Tx) error {
		var n int
		return tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n)
	})
	if err == nil {
		err = s.w.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var v int64
			if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.FormatInt(v, 10))
			return err
		}, nil)
	}
	if err == nil || errors.Is(err, store.ErrStorageFull) { // a full disk reads on: usable
		s.health.set(nil)
	}
	return err
}

// runProber probes an unusable database every interval until it is usable
// again, or damaged (no probe mends that); it stops at Close.
func (s *Store) runProber(interval time.Duration) {
	defer s.janitor.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.health.broken:
		}
		t := time.NewTicker(interval)
		for usable := false; !usable; {
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
				usable = s.Probe(context.Background()) == nil || s.health.isDamaged()
			}
		}
		t.Stop()
	}
}
