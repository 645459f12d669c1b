package main

import (
	"math"
	"testing"
)

// TestMemoryLimit: issue 11's bound on big reads ("at most the memory budget plus 2x the response
// budget plus 100 MB") holds by default: auto sets the runtime's soft limit to the sum of the
// budgets plus headroom, unless GOMEMLIMIT is set or a budget is unbounded; off and sizes are taken
// as given; anything else is a usage error.
func TestMemoryLimit(t *testing.T) {
	base := func(limit string) config {
		c, err := parseConfig([]string{"--memory-limit", limit}, envOf(nil))
		if err != nil && limit != "0" && limit != "lots" {
			t.Fatal(err)
		}
		c.MemoryLimit = limit
		c.Store.Engine = storeMemory
		c.History.MemoryBudget = 320 << 20
		c.Exchange.MaxBytes = 16 << 20
		c.Serving.Limits.MaxResponseBytes = 4 << 20
		return c
	}
	noEnv := func(string) string { return "" }
	tests := []struct {
		name    string
		c       config
		getenv  func(string) string
		limit   int64
		set     bool
		wantErr bool
	}{
		{"auto: the budgets plus headroom", base("auto"), noEnv, 320<<20 + 16<<20 + 2*(4<<20) + memLimitHeadroom, true, false},
		{"auto defers to GOMEMLIMIT", base("auto"), func(k string) string {
			if k == "GOMEMLIMIT" {
				return "1GiB"
			}
			return ""
		}, 0, false, false},
		{"auto with an unbounded memory budget", func() config { c := base("auto"); c.History.MemoryBudget = 0; return c }(), noEnv, 0, false, false},
		{"auto with an unbounded exchange", func() config { c := base("auto"); c.Exchange.MaxBytes = 0; return c }(), noEnv, 0, false, false},
		// Issue 14: the sqlite engine's page caches are outside the Go heap (modernc's C
		// allocator), so they are not in the heap's limit; --memory-budget is the memory
		// engine's and does not count (not even when it is 0).
		// Issue 17 (review17): the sqlite and postgres engines keep the Exchange in the
		// database; --exchange-max-bytes is the memory engine's byte budget and does not count
		// either (not even when it is 0).
		{"auto with sqlite: no store share", func() config {
			c := base("auto")
			c.Store.Engine, c.Store.SQLiteCache, c.Store.SQLiteReaders = storeSQLite, 8<<20, 3
			return c
		}(), noEnv, 2*(4<<20) + memLimitHeadroom, true, false},
		{"auto with sqlite ignores unbounded memory-engine budgets", func() config {
			c := base("auto")
			c.Store.Engine, c.History.MemoryBudget, c.Exchange.MaxBytes = storeSQLite, 0, 0
			return c
		}(), noEnv, 2*(4<<20) + memLimitHeadroom, true, false},
		{"auto with postgres: no store share", func() config {
			c := base("auto")
			c.Store.Engine = storePostgres
			return c
		}(), noEnv, 2*(4<<20) + memLimitHeadroom, true, false},
		{"auto with postgres ignores an unbounded exchange", func() config {
			c := base("auto")
			c.Store.Engine, c.Exchange.MaxBytes = storePostgres, 0
			return c
		}(), noEnv, 2*(4<<20) + memLimitHeadroom, true, false},
		{"off", base("off"), noEnv, math.MaxInt64, true, false},
		{"a size", base("512MiB"), noEnv, 512 << 20, true, false},
		{"zero", base("0"), noEnv, 0, false, true},
		{"garbage", base("lots"), noEnv, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit, set, err := memoryLimit(tc.c, tc.getenv)
			if (err != nil) != tc.wantErr || limit != tc.limit || set != tc.set {
				t.Errorf("memoryLimit = %d, %v, %v; want %d, %v, error %v", limit, set, err, tc.limit, tc.set, tc.wantErr)
			}
		})
	}
	if _, err := parseConfig([]string{"--memory-limit", "lots"}, envOf(nil)); err == nil {
		t.Error("--memory-limit lots was accepted")
	}
}
