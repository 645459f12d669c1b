package main

import (
	"flag"
	"math"
	"runtime/debug"
)

// memLimitHeadroom is what the automatic memory limit allows beyond the budgets: the runtime,
// goroutine stacks, connection buffers and the requests in flight that no budget charges (an idle
// historyd is about 20 MB resident).
const memLimitHeadroom = 64 << 20

// memLimitSetting is --memory-limit: the Go runtime's soft memory limit (GOMEMLIMIT). The budgets
// bound what historyd keeps, but not the garbage its responses leave behind: the collector lets
// that grow to --gc-percent of the live heap before it collects, so under a stream of large reads
// the heap passes the sum of the budgets by half the live data (issue 11: 190 MB over a 335 MB
// history). A soft limit at the sum of the budgets makes the collector run before that happens; it
// is soft, so a live heap above it slows the collector's pace but never fails an allocation.
var memLimitSetting = setting{"memory-limit", "HISTORYD_MEMORY_LIMIT", "auto",
	"the Go runtime's soft memory limit (GOMEMLIMIT), so garbage from large reads is collected before the heap passes the budgets: a size with an optional KiB, MiB or GiB suffix, or off; auto = $GOMEMLIMIT when it is set, else --memory-budget + --exchange-max-bytes (both with --store memory only: sqlite and postgres keep the history and the Exchange in the database, and the sqlite engine's caches are outside the Go heap) + twice --max-response-bytes + 64MiB (off when a budget of the memory engine is 0, unbounded)"}

func init() { settings = append(settings, memLimitSetting) }

// registerMemoryLimit defines --memory-limit on fs.
func registerMemoryLimit(fs *flag.FlagSet, value *string) {
	fs.StringVar(value, memLimitSetting.flag, memLimitSetting.def, memLimitSetting.usage)
}

// memoryLimit returns the soft memory limit c asks for and whether historyd must set it: auto
// leaves a GOMEMLIMIT from the environment to the runtime, which has applied it already, and sets
// none when a budget is unbounded (there is no sum to set).
func memoryLimit(c config, getenv func(string) string) (limit int64, set bool, err error) {
	switch c.MemoryLimit {
	case "auto":
		if getenv("GOMEMLIMIT") != "" {
			return 0, false, nil
		}
		// The store's share of the Go heap: the memory engine's budgets, the history's and the
		// Exchange's; none for the sqlite and postgres engines, whose data is in the database
		// (the sqlite page caches modernc's C allocator keeps outside the Go heap: a limit that
		// counted them would let the heap grow by as much again), and whose Exchange is too, so
		// --exchange-max-bytes, the memory engine's byte budget, bounds nothing there (issue 17).
		history, exchange := int64(c.History.MemoryBudget), c.Exchange.MaxBytes
		if c.Store.Engine != storeMemory {
			history, exchange = 0, 0
		} else if history <= 0 || exchange <= 0 {
			return 0, false, nil
		}
		response := int64(c.Serving.Limits.MaxResponseBytes)
		return history + exchange + 2*response + memLimitHeadroom, true, nil
	case "off":
		return math.MaxInt64, true, nil
	}
	var b byteSize
	if err := b.Set(c.MemoryLimit); err != nil || b <= 0 {
		return 0, false, badValue("memory-limit", "%q: want auto, off or a positive size such as 512MiB", c.MemoryLimit)
	}
	return int64(b), true, nil
}

// applyMemoryLimit sets the runtime's soft memory limit as c asks; the "serving" log line reports
// the limit in force.
func applyMemoryLimit(c config, getenv func(string) string) error {
	limit, set, err := memoryLimit(c, getenv)
	if err != nil || !set {
		return err
	}
	debug.SetMemoryLimit(limit)
	return nil
}
