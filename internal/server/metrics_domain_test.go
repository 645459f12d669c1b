package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

type fakeStore struct{ st store.Stats }

func (f *fakeStore) Stats() store.Stats { return f.st }

type fakeExchange struct {
	st  exchange.Stats
	err error
}

func (f *fakeExchange) Stats(context.Context) (exchange.Stats, error) { return f.st, f.err }

// TestDomainMetrics: the branch and Exchange metrics report the domain's snapshot as it is at each
// scrape (issue 7: gauges/counters for branches, messages, watchers, owners, queued and
// dead-lettered messages).
func TestDomainMetrics(t *testing.T) {
	m := NewMetrics()
	fs := &fakeStore{st: store.Stats{Branches: 2, Messages: 7, Watchers: 1, MemoryUsed: 4096, MemoryBudget: 1 << 30}}
	fx := &fakeExchange{st: exchange.Stats{Owners: 3, Queued: 4, Inbox: 5, DeadLetters: 6, DeadLettered: 8, Subscribers: 2,
		Bytes: 12345, ByteBudget: 1 << 28}}
	if err := m.WatchStore(fs); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchExchange(fx); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStore(fs); err == nil {
		t.Error("a second WatchStore registered the same metrics twice")
	}
	want := map[string]float64{
		"historyd_branches": 2, "historyd_messages": 7, "historyd_branch_watchers": 1,
		"historyd_store_memory_used_bytes": 4096, "historyd_store_memory_budget_bytes": 1 << 30,
		"historyd_exchange_owners": 3, "historyd_exchange_queued_messages": 4, "historyd_exchange_inbox_messages": 5,
		"historyd_exchange_dead_letters": 6, "historyd_exchange_dead_lettered_total": 8, "historyd_exchange_subscribers": 2,
		"historyd_exchange_used_bytes": 12345, "historyd_exchange_budget_bytes": 1 << 28,
	}
	for name, v := range want {
		if got, ok := metricValue(t, m, name, nil); !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	fs.st.Branches, fx.st.DeadLettered = 5, 9
	if got, _ := metricValue(t, m, "historyd_branches", nil); got != 5 {
		t.Errorf("after a change, historyd_branches = %v, want 5 (read at scrape time)", got)
	}
	if got, _ := metricValue(t, m, "historyd_exchange_dead_lettered_total", nil); got != 9 {
		t.Errorf("after a change, dead lettered = %v, want 9", got)
	}
}

// TestDomainMetricsReal: the real store and Exchange satisfy the interfaces the metrics read.
func TestDomainMetricsReal(t *testing.T) {
	m := NewMetrics()
	x := exchange.Memory()
	defer x.Close()
	if err := m.WatchStore(store.NewMemory()); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchExchange(x); err != nil {
		t.Fatal(err)
	}
	if got, ok := metricValue(t, m, "historyd_exchange_owners", nil); !ok || got != 0 {
		t.Errorf("historyd_exchange_owners = %v (present %v), want 0", got, ok)
	}
}

// TestExchangeMetricsFailure: when a database engine cannot count what the Exchange holds, the
// scrape fails for those metrics with the error instead of reporting an empty Exchange.
func TestExchangeMetricsFailure(t *testing.T) {
	m := NewMetrics()
	fx := &fakeExchange{st: exchange.Stats{Owners: 3}, err: errors.New("database unreachable")}
	if err := m.WatchExchange(fx); err != nil {
		t.Fatal(err)
	}
	_, err := m.reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "database unreachable") {
		t.Fatalf("Gather = %v, want the Exchange's error", err)
	}
	fx.err = nil
	if got, ok := metricValue(t, m, "historyd_exchange_owners", nil); !ok || got != 3 {
		t.Errorf("after recovery historyd_exchange_owners = %v (present %v), want 3", got, ok)
	}
}
