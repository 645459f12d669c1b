package sqlite

import (
	"context"
	"testing"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// newTestStore opens a store on a fresh data directory, closed when the
// test ends.
func newTestStore(t testing.TB, opts storetest.Options) *Store {
	t.Helper()
	return newTestStoreWith(t, opts, func(*StoreConfig) {})
}

// newTestStoreWith is newTestStore with its configuration changed by edit
// before the store opens.
func newTestStoreWith(t testing.TB, opts storetest.Options, edit func(*StoreConfig)) *Store {
	t.Helper()
	cfg := StoreConfig{
		Config:         Config{Dir: t.TempDir(), CacheKiB: 2048, Readers: 2},
		EventRetention: opts.EventRetention, RequestMax: opts.RequestMax,
		SubscriberBuffer: opts.SubscriberBuffer, MaxSubscriptions: opts.MaxSubscriptions,
		Clock: opts.Clock,
	}
	edit(&cfg)
	s, err := OpenStore(context.Background(), cfg)
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

// TestConformance runs storetest on the SQLite engine (issue 14: every
// semantic but the memory budget's is the same on both engines; the gated
// cases are listed in storetest's doc).
func TestConformance(t *testing.T) {
	storetest.RunFor(t, func(t *testing.T, opts storetest.Options) store.Store {
		return newTestStore(t, opts)
	}, storetest.Capabilities{Elsewhere: raceElsewhere})
}
