package postgres

import (
	"context"
	"net/url"
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

// openReady is openTest for a reachable server, returning once the Store is usable.
func openReady(t testing.TB, cfg Config) *Store {
	t.Helper()
	s := openTest(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// On a loaded machine the first connection and migration can outlast Open's attempt, and the
	// Store then keeps connecting in the background (a server unreachable at start): wait for it,
	// so that a test's first call does not meet a database still being reached.
	for {
		changed, unusable := s.Health()
		if unusable == nil {
			return s
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the store did not become usable in 30s: %v", unusable)
		}
	}
}

// TestConformance runs storetest on the PostgreSQL engine (issue 16:
// "storetest.Run passes on PostgreSQL"); the memory budget's cases are
// the memory engine's alone, as for SQLite.
//
// Its sessions commit with synchronous_commit off: the suite checks what a
// store answers, not what survives a crash of the database server (the
// e2e tests and the faults here commit as a deployment does), and not
// waiting for each commit's WAL flush makes ScopesIsolated's 120,000
// sequential writes take a minute, not many.
func TestConformance(t *testing.T) {
	storetest.RunFor(t, func(t *testing.T, opts storetest.Options) store.Store {
		return openReady(t, testConfig(noSyncCommit(t, pgtest.New(t)), opts))
	}, storetest.Capabilities{Elsewhere: raceElsewhere})
}

// noSyncCommit returns u with synchronous_commit off for its sessions.
func noSyncCommit(t testing.TB, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Set("synchronous_commit", "off")
	p.RawQuery = q.Encode()
	return p.String()
}
