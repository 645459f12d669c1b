package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

// StoreStats is what the branch metrics read: a store that reports a snapshot of its contents
// (store.Memory does).
type StoreStats interface {
	Stats() store.Stats
}

// ExchangeStats is what the Exchange metrics read (every exchange.Service implements it). A
// database engine's Stats can fail; the scrape then reports the Exchange's metrics as invalid with
// the error rather than zeros that look like an empty Exchange.
type ExchangeStats interface {
	Stats(ctx context.Context) (exchange.Stats, error)
}

// WatchStore adds the branch metrics of s: historyd_branches, historyd_messages,
// historyd_branch_watchers, historyd_store_memory_used_bytes and
// historyd_store_memory_budget_bytes, read from s.Stats() at each scrape.
func (m *Metrics) WatchStore(s StoreStats) error {
	return m.reg.Register(&snapshotCollector[store.Stats]{
		stats: infallible(s.Stats),
		metrics: []snapshotMetric[store.Stats]{
			gauge("branches", "Branches in the store.", func(st store.Stats) float64 { return float64(st.Branches) }),
			gauge("messages", "Messages in the store's branches, systems included.", func(st store.Stats) float64 { return float64(st.Messages) }),
			gauge("branch_watchers", "Open subscriptions to branches (WatchBranch streams).", func(st store.Stats) float64 { return float64(st.Watchers) }),
			gauge("store_memory_used_bytes", "The store's estimate of the bytes it holds, charged against its budget.", func(st store.Stats) float64 { return float64(st.MemoryUsed) }),
			gauge("store_memory_budget_bytes", "The store's memory budget in bytes (0: no limit).", func(st store.Stats) float64 { return float64(st.MemoryBudget) }),
		},
	})
}

// WatchExchange adds the Exchange metrics of x: historyd_exchange_owners,
// historyd_exchange_queued_messages, historyd_exchange_inbox_messages,
// historyd_exchange_dead_letters, historyd_exchange_dead_lettered_total,
// historyd_exchange_subscribers, historyd_exchange_used_bytes and historyd_exchange_budget_bytes,
// read from x.Stats() at each scrape.
func (m *Metrics) WatchExchange(x ExchangeStats) error {
	return m.reg.Register(&snapshotCollector[exchange.Stats]{
		stats: func() (exchange.Stats, error) {
			ctx, cancel := context.WithTimeout(context.Background(), exchangeStatsTimeout)
			defer cancel()
			return x.Stats(ctx)
		},
		metrics: []snapshotMetric[exchange.Stats]{
			gauge("exchange_owners", "Owners registered with the Exchange.", func(st exchange.Stats) float64 { return float64(st.Owners) }),
			gauge("exchange_queued_messages", "Messages in outboxes, waiting to be collected.", func(st exchange.Stats) float64 { return float64(st.Queued) }),
			gauge("exchange_inbox_messages", "Messages in inboxes, waiting to be received.", func(st exchange.Stats) float64 { return float64(st.Inbox) }),
			gauge("exchange_dead_letters", "Dead letters held now, across owners.", func(st exchange.Stats) float64 { return float64(st.DeadLetters) }),
			counter("exchange_dead_lettered_total", "Dead letters made: messages Collect dropped (unknown or departed recipient, full inbox, ...) and leased messages that reached max attempts.", func(st exchange.Stats) float64 { return float64(st.DeadLettered) }),
			gauge("exchange_subscribers", "Live inbox subscriptions (SubscribeInbox streams).", func(st exchange.Stats) float64 { return float64(st.Subscribers) }),
			gauge("exchange_used_bytes", "The Exchange's estimate of the bytes of mail it holds (outboxes, inboxes, dead letters, remembered request ids), charged against --exchange-max-bytes.", func(st exchange.Stats) float64 { return float64(st.Bytes) }),
			gauge("exchange_budget_bytes", "The Exchange's byte budget, --exchange-max-bytes (0: no limit).", func(st exchange.Stats) float64 { return float64(st.ByteBudget) }),
		},
	})
}

// snapshotMetric is one metric of a snapshot: its description and how to read it.
type snapshotMetric[S any] struct {
	desc   *prometheus.Desc
	metric func(*prometheus.Desc, S) prometheus.Metric
}

func gauge[S any](name, help string, value func(S) float64) snapshotMetric[S] {
	return scalar(name, help, prometheus.GaugeValue, nil, value)
}

func counter[S any](name, help string, value func(S) float64) snapshotMetric[S] {
	return scalar(name, help, prometheus.CounterValue, nil, value)
}

// labeledCounter is a counter with constant labels, so that one name can have a series per mode
// read from different fields.
func labeledCounter[S any](name, help string, labels prometheus.Labels, value func(S) float64) snapshotMetric[S] {
	return scalar(name, help, prometheus.CounterValue, labels, value)
}

func scalar[S any](name, help string, typ prometheus.ValueType, labels prometheus.Labels, value func(S) float64) snapshotMetric[S] {
	return snapshotMetric[S]{
		desc: prometheus.NewDesc(metricsNamespace+"_"+name, help, nil, labels),
		metric: func(d *prometheus.Desc, st S) prometheus.Metric {
			return prometheus.MustNewConstMetric(d, typ, value(st))
		},
	}
}

// histogram is a histogram of the snapshot; labels are constant, so that one name can have a
// series per mode read from different fields.
func histogram[S any](name, help string, labels prometheus.Labels, value func(S) store.Histogram) snapshotMetric[S] {
	return snapshotMetric[S]{
		desc: prometheus.NewDesc(metricsNamespace+"_"+name, help, nil, labels),
		metric: func(d *prometheus.Desc, st S) prometheus.Metric {
			h := value(st)
			buckets := make(map[float64]uint64, len(h.Bounds))
			for i, le := range h.Bounds {
				buckets[le] = h.Buckets[i]
			}
			return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
		},
	}
}

// snapshotCollector is a prometheus.Collector that takes one snapshot per scrape and reports its
// metrics from it, so the domain needs no Prometheus types and no counters kept twice.
type snapshotCollector[S any] struct {
	stats   func() (S, error)
	metrics []snapshotMetric[S]
}

// Describe sends the descriptions of the collector's metrics.
func (c *snapshotCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, sm := range c.metrics {
		ch <- sm.desc
	}
}

// Collect takes a snapshot and sends every metric read from it.
func (c *snapshotCollector[S]) Collect(ch chan<- prometheus.Metric) {
	st, err := c.stats()
	for _, sm := range c.metrics {
		if err != nil {
			ch <- prometheus.NewInvalidMetric(sm.desc, err)
			continue
		}
		ch <- sm.metric(sm.desc, st)
	}
}

// exchangeStatsTimeout bounds the Exchange's part of a scrape: a database engine counts with a
// query, and a scrape must not hang on a database that does not answer.
const exchangeStatsTimeout = 5 * time.Second

// infallible adapts a snapshot function that cannot fail to snapshotCollector's.
func infallible[S any](f func() S) func() (S, error) {
	return func() (S, error) { return f(), nil }
}
