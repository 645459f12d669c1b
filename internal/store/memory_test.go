package store_test

import (
	"testing"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// TestMemoryConformance runs the conformance suite against the memory
// backend (docs/development.md#style-tests: every backend runs storetest.Run).
func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, o storetest.Options) store.Store {
		var opts []store.Option
		if o.MemoryBudget > 0 {
			opts = append(opts, store.WithMemoryBudget(o.MemoryBudget))
		}
		if o.EventRetention > 0 {
			opts = append(opts, store.WithEventRetention(o.EventRetention))
		}
		if o.Clock != nil || o.RequestMax > 0 {
			limit := store.DefaultRequestMax
			if o.RequestMax > 0 {
				limit = o.RequestMax
			}
			opts = append(opts, store.WithRequestWindow(store.DefaultRequestTTL, limit))
		}
		if o.Clock != nil {
			opts = append(opts, store.WithClock(o.Clock))
		}
		if o.SubscriberBuffer > 0 {
			opts = append(opts, store.WithSubscriberBuffer(o.SubscriberBuffer))
		}
		if o.MaxSubscriptions > 0 {
			opts = append(opts, store.WithMaxSubscriptions(o.MaxSubscriptions))
		}
		return store.NewMemory(opts...)
	})
}
