package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// testConfig is a Store's configuration over url with a small pool: the
// server's 100 connections are shared by every test and engineer.
func testConfig(url string, opts storetest.Options) Config {
	return Config{
		URL: url, MaxConns: 4,
		EventRetention: opts.EventRetention, RequestMax: opts.RequestMax,
		SubscriberBuffer: opts.SubscriberBuffer, MaxSubscriptions: opts.MaxSubscriptions,
		Clock: opts.Clock,
	}
}

// openTest opens a Store with cfg, closed when the test ends.
func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestConformance runs storetest on the PostgreSQL engine (issue 16:
// "storetest.Run passes on PostgreSQL"); the memory budget's cases are
// the memory engine's alone, as for SQLite.
func TestConformance(t *testing.T) {
	storetest.RunFor(t, func(t *testing.T, opts storetest.Options) store.Store {
		return openTest(t, testConfig(pgtest.New(t), opts))
	}, storetest.Capabilities{Elsewhere: raceElsewhere})
}
