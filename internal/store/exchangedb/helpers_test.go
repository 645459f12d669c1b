package exchangedb_test

import (
	"context"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// xopts maps the suite's Options to exchange.Option one for one, as the memory engine's run does
// (internal/exchange/memory_conformance_test.go); NoBound is "n <= 0 means no bound".
func xopts(o exchangetest.Options) []exchange.Option {
	var opts []exchange.Option
	bound := func(n int, with func(int) exchange.Option) {
		switch {
		case n == exchangetest.NoBound:
			opts = append(opts, with(0))
		case n > 0:
			opts = append(opts, with(n))
		}
	}
	bound(o.MaxOutbox, exchange.WithMaxOutbox)
	bound(o.MaxInbox, exchange.WithMaxInbox)
	bound(o.MaxSubscriptions, exchange.WithMaxSubscriptions)
	if o.MaxDeadLetters > 0 {
		opts = append(opts, exchange.WithMaxDeadLetters(o.MaxDeadLetters))
	}
	if o.SubscriberBuffer > 0 {
		opts = append(opts, exchange.WithSubscriberBuffer(o.SubscriberBuffer))
	}
	if o.RequestTTL > 0 || o.RequestCount > 0 {
		ttl, n := o.RequestTTL, o.RequestCount
		if ttl <= 0 {
			ttl = exchange.DefaultRequestTTL
		}
		if n <= 0 {
			n = exchange.DefaultRequestsPerSender
		}
		opts = append(opts, exchange.WithRequestMemory(ttl, n))
	}
	if o.Clock != nil {
		opts = append(opts, exchange.WithClock(o.Clock))
	}
	if o.Background {
		opts = append(opts, exchange.WithBackgroundCollection(true))
	}
	return opts
}

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openSQLite opens a sqlite store in dir; the caller closes it.
func openSQLite(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.OpenStore(context.Background(), sqlite.StoreConfig{Config: sqlite.Config{Dir: dir, CacheKiB: 1024, Readers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sqliteFactory builds the Engine over a fresh sqlite database per test; the Engine closes before
// the store (cleanups run last-registered first).
func sqliteFactory(t *testing.T, o exchangetest.Options) exchange.Service {
	s := openSQLite(t, t.TempDir())
	t.Cleanup(func() { _ = s.Close() })
	e := exchangedb.New(s.ExchangeDriver(), xopts(o))
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func openSQLiteB(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.OpenStore(context.Background(), sqlite.StoreConfig{Config: sqlite.Config{Dir: b.TempDir(), CacheKiB: 4096, Readers: 4, Sync: sqlite.SyncNormal}})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func sqliteEngineB(s *sqlite.Store, o exchangetest.Options) *exchangedb.Engine {
	return exchangedb.New(s.ExchangeDriver(), xopts(o))
}
