package main

import (
	"flag"
	"runtime/debug"
	"strconv"
)

// DefaultGCPercent is the collector's GOGC that historyd runs with unless told otherwise. Its heap
// is mostly long-lived history, which the runtime's default of 100 lets the heap grow to twice over
// before collecting: a store that holds 1 GiB of messages would take 2 GiB. At 50 the heap stays
// within one and a half times the live data (make bench: about 2.45 KB resident per stored 1 KB
// message at 50, 3.0 KB at 100), for a collector that runs twice as often; the collector's share of
// the CPU stays small because most of the heap is strings it does not scan.
const DefaultGCPercent = 50

// DatabaseGCPercent is the GOGC of auto with the sqlite and postgres engines, whose history is in
// the database: their live heap is small (handles, caches of branch rows, buffers) and what they
// allocate is almost all per-call garbage, so GOGC mostly sets how often the collector runs, not
// how much memory the heap holds. At 50 the heap goal sat at the runtime's floor (4 MiB x GOGC/100)
// and the collector ran dozens of times a second under load, each time scanning every goroutine's
// stack (the writer's deep SQLite frames among them) and shrinking the idle handlers' stacks, which
// the next call grew again: on sqlite at concurrency 50 (issue 14's AddMessage row), the server's
// CPU a call went from about 135-146 µs at 50 to about 111 at 100 and 95 at 200 and 400. The heap
// stays far below --memory-limit's auto value for these engines (twice --max-response-bytes +
// 64 MiB), which bounds it anyway.
const DatabaseGCPercent = 400

// gcSetting is --gc-percent: the Go collector's GOGC. init appends it to settings, so it gets the
// environment fallback, the usage line and the README row.
var gcSetting = setting{"gc-percent", "HISTORYD_GC_PERCENT", "auto",
	"the Go collector's GOGC: a percent of the live heap to allocate before collecting again, or off; auto = $GOGC when it is set, else " +
		strconv.Itoa(DefaultGCPercent) + " with --store memory and " + strconv.Itoa(DatabaseGCPercent) + " with sqlite or postgres"}

func init() { settings = append(settings, gcSetting) }

// registerGC defines --gc-percent on fs.
func registerGC(fs *flag.FlagSet, value *string) {
	fs.StringVar(value, gcSetting.flag, gcSetting.def, gcSetting.usage)
}

// gcPercent returns the GOGC that value asks for with the engine named store and whether historyd
// must set it: auto leaves a GOGC from the environment to the runtime, which has applied it already.
func gcPercent(value, store string, getenv func(string) string) (percent int, set bool, err error) {
	switch value {
	case "auto":
		if getenv("GOGC") != "" {
			return 0, false, nil
		}
		if store != storeMemory {
			return DatabaseGCPercent, true, nil
		}
		return DefaultGCPercent, true, nil
	case "off":
		return -1, true, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 {
		return 0, false, badValue("gc-percent", "%q: want auto, off or a positive integer", value)
	}
	return n, true, nil
}

// applyGC sets the collector's GOGC as value asks with the engine named store.
func applyGC(value, store string, getenv func(string) string) error {
	n, set, err := gcPercent(value, store, getenv)
	if err != nil || !set {
		return err
	}
	debug.SetGCPercent(n)
	return nil
}
