package exchangedb

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/historyd/historyd/internal/exchange"
)

// DefaultRetention is how long the ledger keeps rows in a terminal state (popped, acked, returned,
// evicted), and the messages only they refer to, before the pruner forgets them (common17).
const DefaultRetention = time.Hour

// DefaultRecheckInterval is how often, on a replicated database, the subscribed inboxes are read
// again, so that a lost wake-up costs at most this much latency, never mail.
const DefaultRecheckInterval = 2 * time.Second

// DefaultCollectSweep is how often the background collector (when enabled) looks for owners with
// queued mail however it was sent, so mail a replica acknowledged and could not collect (it died)
// is collected within about this long by the others.
const DefaultCollectSweep = 10 * time.Second

// tenant is the default tenant, as the history tables use (”).
const tenant = ""

// Option configures an Engine beyond the Exchange's own options.
type Option func(*config)

type config struct {
	retention time.Duration
	recheck   time.Duration
	sweep     time.Duration
}

// WithRetention sets how long terminal ledger rows are kept (d <= 0: DefaultRetention).
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.retention = d
		}
	}
}

// WithRecheckInterval sets the lost-wake-up recheck period (d <= 0: DefaultRecheckInterval).
func WithRecheckInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.recheck = d
		}
	}
}

// WithCollectSweep sets the background collector's sweep period (d <= 0: DefaultCollectSweep).
func WithCollectSweep(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.sweep = d
		}
	}
}

// Engine is exchange.Service and exchange.Ledgered over a Driver. Safe for concurrent use, and so
// are several Engines over one PostgreSQL database (replicas).
type Engine struct {
	d   Driver
	dia Dialect
	set exchange.Settings
	cfg config

	closed    atomic.Bool
	closeOnce sync.Once
	subs      *subscribers // subscribe.go
	bg        *collector   // background.go; nil unless exchange.WithBackgroundCollection(true)
	sent      *sentCache   // sent.go; SQLite only

	stop chan struct{}
	wg   sync.WaitGroup
}

var (
	_ exchange.Service  = (*Engine)(nil)
	_ exchange.Ledgered = (*Engine)(nil)
)

// New returns the Exchange kept in d's database, configured by xopts as exchange.New is (the byte
// budget excepted: the database engines are bounded by the per-owner bounds and the database's
// size) and by opts. It starts the wake-up dispatcher and the pruner, and the background collector
// when asked for; Close stops them.
func New(d Driver, xopts []exchange.Option, opts ...Option) *Engine {
	cfg := config{retention: DefaultRetention, recheck: DefaultRecheckInterval, sweep: DefaultCollectSweep}
	for _, o := range opts {
		o(&cfg)
	}
	e := &Engine{d: d, dia: d.Dialect(), set: exchange.ResolveOptions(xopts...), cfg: cfg, stop: make(chan struct{})}
	e.subs = newSubscribers(e)
	if e.dia == SQLite {
		e.sent = newSentCache()
	}
	replicated := d.Listen(e.subs.wake)
	e.wg.Add(2)
	go e.subs.run(replicated)
	go e.runPruner()
	if e.set.Background {
		e.bg = startCollector(e)
	}
	return e
}

// Close stops the background collector (waiting for it), ends the live subscriptions with
// exchange.ErrClosed and stops the Engine's goroutines; from then on Send and Subscribe fail with
// exchange.ErrClosed, and everything else keeps working (what owners hold stays readable). It
// does not close the database: the store does. Safe to call more than once.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		if e.bg != nil {
			e.bg.stop()
		}
		close(e.stop)
		e.wg.Wait()
		e.subs.endAll(exchange.ErrClosed)
	})
	return nil
}

func (e *Engine) now() time.Time { return e.set.Now() }

// background is a context for the Engine's own work, ended by Close.
func (e *Engine) background(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-e.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
