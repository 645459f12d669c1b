package exchangedb_test

import (
	"context"
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// openPostgres opens a postgres store over url (a schema of its own, pgtest); the caller closes
// it. Small pool: the machine is shared (MaxConns 2-4).
func openPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// postgresEngine opens an engine with xopts on a PostgreSQL store in a
// schema of its own, both closed when the test ends, and returns the
// schema's URL (for the test's own sessions) with it.
func postgresEngine(t *testing.T, xopts []exchange.Option) (string, *exchangedb.Engine) {
	t.Helper()
	url := pgtest.New(t)
	s := openPostgres(t, url)
	t.Cleanup(func() { _ = s.Close() })
	e := exchangedb.New(s.ExchangeDriver(), xopts)
	t.Cleanup(func() { _ = e.Close() })
	return url, e
}

func postgresFactory(t *testing.T, o exchangetest.Options) exchange.Service {
	s := openPostgres(t, pgtest.New(t))
	t.Cleanup(func() { _ = s.Close() })
	e := exchangedb.New(s.ExchangeDriver(), o.ExchangeOptions())
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestPostgresConformance runs the exchange conformance suite on the PostgreSQL engine (issue 17
// Acceptance); skipped only where no PostgreSQL answers (pgtest).
func TestPostgresConformance(t *testing.T) {
	exchangetest.Run(t, postgresFactory, exchangetest.Capabilities{})
}
