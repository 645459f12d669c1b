package main

import "github.com/historyd/historyd/internal/server"

// The most of each count that historyd allocates for whole, up front: a larger value is refused at
// start (exit 2) rather than found by the kernel's OOM killer. --stream-workers 4294967295 was
// accepted, and the process died at start with a goroutine dump of that many workers; the buffers
// and the append window are allocated whole by every stream that opens, so one call would do it.
// The other counts (streams, connections, retention, the Exchange's bounds) only cap what grows on
// demand, and need no maximum of their own.
const (
	// maxStreamWorkers and maxAppendWindow bound fields of server.Limits, which Limits.Validate
	// checks (the usage line comes from its refusal, config_serving.go); they are here for the
	// usage hint.
	maxStreamWorkers = server.MaxStreamWorkers
	maxAppendWindow  = server.MaxMaxAppendWindow
	// maxWatchBuffer: each WatchBranch stream allocates a channel of this many commits when it
	// opens (65536 x 24 bytes = 1.5 MiB), before it holds any.
	maxWatchBuffer = 65536
	// maxExchangeSubscriberBuffer: each SubscribeInbox stream allocates a channel of this many
	// messages when it opens (65536 x 8 bytes = 512 KiB).
	maxExchangeSubscriberBuffer = 65536
)

// countRanges are the bounded counts' ranges, for the usage hint (validHint) and, but for the two
// of server.Limits, the checks.
var countRanges = map[string][2]int64{
	"stream-workers":             {0, maxStreamWorkers},
	"watch-buffer":               {1, maxWatchBuffer},
	"exchange-subscriber-buffer": {1, maxExchangeSubscriberBuffer},
	"append-max-window":          {0, maxAppendWindow},
}

// checkMaximum returns the usage error for a count above its flag's maximum (the lower bounds
// have their own checks, older than these).
func checkMaximum(flag string, n int64) error {
	if r := countRanges[flag]; n > r[1] {
		return badValue(flag, "%d: want %d to %d (it is allocated whole, up front)", n, r[0], r[1])
	}
	return nil
}
