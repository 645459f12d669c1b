package server

import (
	"sync"

	"github.com/google/uuid"
)

// leaseHub wakes this server's leasing SubscribeInbox streams of an owner after an Ack or a Nack
// of that owner through this server: the Ack may have made room under a stream's max_in_flight,
// the Nack made a message visible (now, or after its delay, which the woken stream learns from
// its next Lease). The Exchange's subscription says only that mail landed; an Ack or Nack on
// another replica is noticed by the stream's recheck tick instead (exchange_stream_lease.go).
//
// Signals never block the RPC that sends them: each stream has a one-slot channel, and a signal
// already pending says all that another would ("lease again"). The zero value is ready.
type leaseHub struct {
	mu      sync.Mutex
	waiters map[uuid.UUID]map[chan struct{}]struct{}
}

// join registers a stream of owner and returns its wake-up channel and the function that removes
// it, which the stream must call (once) when it ends.
func (h *leaseHub) join(owner uuid.UUID) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.waiters == nil {
		h.waiters = map[uuid.UUID]map[chan struct{}]struct{}{}
	}
	ws := h.waiters[owner]
	if ws == nil {
		ws = map[chan struct{}]struct{}{}
		h.waiters[owner] = ws
	}
	ws[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(ws, ch)
		if len(ws) == 0 {
			// ws is still h.waiters[owner]: a map is dropped only once empty, so one that held ch
			// until now was the owner's.
			delete(h.waiters, owner)
		}
	}
}

// notify wakes every stream of owner on this server, without waiting for any.
func (h *leaseHub) notify(owner uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[owner] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// streams is the number of streams of owner waiting, for tests.
func (h *leaseHub) streams(owner uuid.UUID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiters[owner])
}
