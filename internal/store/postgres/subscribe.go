package postgres

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store"
)

type (
	pgxTx    = pgx.Tx
	pgxBatch = pgx.Batch
)

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// Subscribe opens a subscription to a branch's commits (store.Store): the
// branch's handle, brought to the database's head first (so a cursor
// another replica acknowledged is not ahead here), registers it under the
// handle's lock; the replay is read from the events table by the
// subscription's reader, a chunk at a time.
func (s *Store) Subscribe(ctx context.Context, id uuid.UUID, in store.SubscribeInput) (sub *store.Subscription, err error) {
	err = s.withHandle(ctx, id, func(h *handle) error {
		sub, err = h.feed.Subscribe(h.id, h.incarnation, in, store.SubscriptionLimits{
			Buffer: s.cfg.SubscriberBuffer, BufferBytes: s.cfg.SubscriberBufferBytes, Max: s.cfg.MaxSubscriptions, Open: &s.subsOpen,
		})
		return err
	})
	return sub, err
}

// withHandle runs fn with the branch's handle pinned, caught up with the
// database and locked for writing; a branch deleted meanwhile is
// ErrBranchNotFound (or, recreated, its new incarnation's handle).
func (s *Store) withHandle(ctx context.Context, id uuid.UUID, fn func(h *handle) error) error {
	if err := s.usable(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		h, fresh, err := s.pin(ctx, id)
		if err != nil {
			return err
		}
		if !fresh {
			if err := s.sync(ctx, h); err != nil {
				s.unpin(h)
				return err
			}
		}
		if s.hookBeforeLock != nil {
			s.hookBeforeLock()
		}
		h.mu.Lock()
		if s.closed.Load() {
			// Close's endAll, which ends every subscriber under this
			// lock, has run or will find this handle: a subscription
			// registered now would outlive it (issue 16 review 1).
			h.mu.Unlock()
			s.unpin(h)
			return store.ErrClosed
		}
		if h.deleted {
			h.mu.Unlock()
			s.unpin(h)
			if attempt < 3 {
				continue
			}
			return &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
		}
		err = fn(h)
		h.mu.Unlock()
		s.unpin(h)
		return err
	}
}

// Observe adds a message-added observer to a branch (store.Store,
// ADR-0006 D4). Observers live in this process and hear of the writes
// made through it: they are code, not data.
func (s *Store) Observe(id uuid.UUID, o store.Observer) (func(), error) {
	var (
		h   *handle
		key uint64
	)
	err := s.withHandle(context.Background(), id, func(hd *handle) error {
		h = hd
		key = h.observers.Add(o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() {
		h.mu.Lock()
		h.observers.Remove(key)
		h.mu.Unlock()
		s.release(h)
	}, nil
}

// observersOf returns the observers of a branch's incarnation.
func (s *Store) observersOf(id, incarnation uuid.UUID) []store.Observer {
	h := s.handleOf(id, incarnation)
	if h == nil {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.observers.Snapshot()
}
