package sqlite

import (
	"math"
	"sort"
	"sync/atomic"

	"github.com/historyd/historyd/internal/store"
)

// histogram counts observations in fixed buckets for the storage metrics: one goroutine (the
// writer) observes, a scrape reads a snapshot at any time. An observation is a few atomic adds, so
// the writer can afford one per batch.
type histogram struct {
	bounds []float64       // upper bounds, ascending
	counts []atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    atomic.Uint64   // float64 bits; one observer, so load then store does not lose adds
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// observe records v; the writer goroutine only.
func (h *histogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)].Add(1) // the first bound >= v: Prometheus's le
	h.sum.Store(math.Float64bits(math.Float64frombits(h.sum.Load()) + v))
}

// snapshot returns the buckets so far. Count is the buckets' total, so the two always agree;
// Sum may lag or lead them by an observation made while the snapshot was read.
func (h *histogram) snapshot() store.Histogram {
	s := store.Histogram{Bounds: h.bounds, Buckets: make([]uint64, len(h.bounds))}
	for i := range h.counts {
		s.Count += h.counts[i].Load()
		if i < len(h.bounds) {
			s.Buckets[i] = s.Count
		}
	}
	s.Sum = math.Float64frombits(h.sum.Load())
	return s
}
