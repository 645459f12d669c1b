package sqlite

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// Subscribe opens a subscription to a branch's commits (store.Store): the
// branch's handle (made on the writer goroutine, so that its head lines up
// with the commits published after it) registers it under the handle's
// lock, as store.Memory's branch lock does; the replay is read from the
// events table by the subscription's reader, a chunk at a time.
func (s *Store) Subscribe(ctx context.Context, id uuid.UUID, in store.SubscribeInput) (sub *store.Subscription, err error) {
	err = s.withHandle(ctx, id, func(h *handle) error {
		sub, err = h.feed.Subscribe(h.id, h.incarnation, in, store.SubscriptionLimits{
			Buffer: s.cfg.SubscriberBuffer, BufferBytes: s.cfg.SubscriberBufferBytes, Max: s.cfg.MaxSubscriptions, Open: &s.subsOpen,
		})
		return err
	})
	return sub, err
}

// withHandle runs fn with the branch's handle pinned and locked for
// writing; a branch deleted meanwhile is ErrBranchNotFound.
func (s *Store) withHandle(ctx context.Context, id uuid.UUID, fn func(h *handle) error) error {
	h, err := s.pin(ctx, id)
	if err != nil {
		return err
	}
	defer s.unpin(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.deleted {
		return &store.BranchError{Err: store.ErrBranchNotFound, BranchID: id}
	}
	return fn(h)
}

// Observe adds a message-added observer to a branch (store.Store,
// ADR-0006 D4). Observers live in this process: they are code, not data.
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
		s.mu.Lock()
		s.release(h)
		s.mu.Unlock()
	}, nil
}

// observersOf returns the observers of a branch's incarnation.
func (s *Store) observersOf(id, incarnation uuid.UUID) []store.Observer {
	s.mu.Lock()
	h := s.handles[id]
	s.mu.Unlock()
	if h == nil || h.incarnation != incarnation {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.observers.Snapshot()
}
