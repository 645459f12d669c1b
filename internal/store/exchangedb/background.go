package exchangedb

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// collector is the optional background collection loop (exchange.WithBackgroundCollection): it
// collects the owners that sent through this Engine since its last pass, and at start every owner
// with queued messages (mail sent before a restart). Across replicas the per-owner collect lock
// (pg_advisory_xact_lock) means one owner is never collected twice at once.
type collector struct {
	e     *Engine
	mu    sync.Mutex
	dirty map[uuid.UUID]struct{}
	kick  chan struct{}
	quit  chan struct{}
	done  chan struct{}
}

func startCollector(e *Engine) *collector {
	c := &collector{e: e, dirty: map[uuid.UUID]struct{}{}, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *collector) note(owners ...uuid.UUID) {
	c.mu.Lock()
	for _, o := range owners {
		c.dirty[o] = struct{}{}
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *collector) run() {
	defer close(c.done)
	c.queuedAtStart()
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
			c.pass()
		}
	}
}

// queuedAtStart notes the owners whose outboxes hold mail already.
func (c *collector) queuedAtStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var owners []uuid.UUID
	err := c.e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		owners = owners[:0]
		return collect(ctx, q, func(r Rows) error {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			id, err := parseUUID(s)
			owners = append(owners, id)
			return err
		}, `SELECT owner FROM exchange_owners WHERE tenant = ? AND queued > 0 ORDER BY reg_seq`, tenant)
	})
	if err == nil && len(owners) > 0 {
		c.note(owners...)
	}
}

// pass collects the noted owners; one that fails (a fault, a panic: reported to the panic
// handler) is noted again for the next pass.
func (c *collector) pass() {
	c.mu.Lock()
	owners := make([]uuid.UUID, 0, len(c.dirty))
	for o := range c.dirty {
		owners = append(owners, o)
	}
	c.dirty = map[uuid.UUID]struct{}{}
	c.mu.Unlock()
	slices.SortFunc(owners, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	for _, o := range owners {
		select {
		case <-c.quit:
			return
		default:
		}
		if !c.collect(o) {
			c.mu.Lock()
			c.dirty[o] = struct{}{}
			c.mu.Unlock()
		}
	}
}

func (c *collector) collect(owner uuid.UUID) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if c.e.set.OnPanic != nil {
				c.e.set.OnPanic(p)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.e.Collect(ctx, owner, exchange.ReportOptions{})
	return err == nil || isNotRegistered(err)
}

func (c *collector) stop() {
	close(c.quit)
	<-c.done
}
