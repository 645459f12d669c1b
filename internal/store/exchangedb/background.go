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
// collects the owners that sent through this Engine as they send, and every sweep interval (and at
// start) the owners with queued messages whoever acknowledged them: another replica that died
// right after acknowledging a Send, or mail sent before a restart, is collected too (review R2b).
// A collect that fails (a fault) is retried with backoff, not left until the next Send (R2a), and
// reported (exchange.WithCollectFailureHandler) at most once per owner per
// exchange.CollectFailureReportEvery: a collect that fails for ever (an outbox PostgreSQL could not
// route, before docs/decisions/0012 row 24) went on failing with nothing logged.
// Across replicas the per-owner collect lock (pg_advisory_xact_lock) means one owner is never
// collected twice at once, so every replica sweeping is safe.
type collector struct {
	e      *Engine
	mu     sync.Mutex
	dirty  map[uuid.UUID]struct{}
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{}
	ctx    context.Context // cancelled by stop: Close never waits out a collect's timeout
	cancel context.CancelFunc
	// reported is when each owner's failure was last reported (only the loop's goroutine uses
	// it); an owner is forgotten once its collect succeeds, so the map holds failing owners only.
	reported map[uuid.UUID]time.Time
}

// Retry backoff after a failed collect: from retryMin, doubling to retryMax.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 5 * time.Second
)

// sweepLimit bounds the owners one sweep reads (bounded memory); the next sweep reads the rest.
const sweepLimit = 1000

func startCollector(e *Engine) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{e: e, dirty: map[uuid.UUID]struct{}{}, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel,
		reported: map[uuid.UUID]time.Time{}}
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
	sweep := time.NewTicker(c.e.cfg.sweep)
	defer sweep.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := retryMin
	c.sweep()
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
		case <-retry.C:
		case <-sweep.C:
			c.sweep()
		}
		if c.pass() {
			backoff = retryMin
			continue
		}
		// Some collect failed and is noted again: try again after a while, not only at the
		// next Send or sweep.
		retry.Reset(backoff)
		backoff = min(2*backoff, retryMax)
	}
}

// sweep notes the owners whose outboxes hold mail (at most sweepLimit of them, those registered
// first); a read that fails is the next sweep's to repeat.
func (c *collector) sweep() {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
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
		}, `SELECT owner FROM exchange_owners WHERE tenant = ? AND queued > 0 ORDER BY reg_seq LIMIT ?`, tenant, int64(sweepLimit))
	})
	if err == nil && len(owners) > 0 {
		c.note(owners...)
	}
}

// pass collects the noted owners; one that fails (a fault, a panic: reported to the panic
// handler) is noted again for the next pass, and pass reports false.
func (c *collector) pass() (ok bool) {
	ok = true
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
			return ok
		default:
		}
		if !c.collect(o) {
			c.mu.Lock()
			c.dirty[o] = struct{}{}
			c.mu.Unlock()
			ok = false
		}
	}
	return ok
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
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	_, err := c.e.Collect(ctx, owner, exchange.ReportOptions{})
	if err == nil || isNotRegistered(err) {
		delete(c.reported, owner)
		return true
	}
	if c.ctx.Err() == nil {
		c.report(owner, err)
	}
	return false
}

// report tells the failure handler of owner's failed collect, unless it heard of owner's within
// exchange.CollectFailureReportEvery.
func (c *collector) report(owner uuid.UUID, err error) {
	h := c.e.set.OnCollectFailure
	if h == nil {
		return
	}
	now := c.e.set.Now()
	if last, ok := c.reported[owner]; ok && now.Sub(last) < exchange.CollectFailureReportEvery {
		return
	}
	c.reported[owner] = now
	h(owner, err)
}

func (c *collector) stop() {
	close(c.quit)
	c.cancel()
	<-c.done
}
