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
	e := exchangedb.New(s.ExchangeDriver(), o.ExchangeOptions())
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
	return exchangedb.New(s.ExchangeDriver(), o.ExchangeOptions())
}
