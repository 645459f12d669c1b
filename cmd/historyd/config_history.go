package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// historyConfig configures the branch store behind HistoryService (issue 4).
type historyConfig struct {
	MemoryBudget   byteSize
	EventRetention int
	// WatchBranch streams (issue 5).
	WatchBuffer      int
	WatchMaxStreams  int
	WatchHeartbeat   time.Duration
	WatchSendTimeout time.Duration
	// WatchBufferBytes bounds a stream's buffer in bytes beside WatchBuffer's count: the count
	// alone let a stream that never reads pin 256 commits of 4 MiB (the hostile review).
	WatchBufferBytes byteSize
}

// historySettings are the store's settings; init appends them to settings, so they get the
// environment fallback, the usage lines and the README table like every other setting.
var historySettings = []setting{
	{"memory-budget", "HISTORYD_MEMORY_BUDGET", "1GiB", "bytes the memory engine (--store memory; refused with the others) may hold, by its estimate of its heap use; a write past it is RESOURCE_EXHAUSTED and changes nothing (a number with an optional KiB, MiB or GiB suffix; 0 = no limit)"},
	{"event-retention", "HISTORYD_EVENT_RETENTION", strconv.Itoa(store.DefaultEventRetention), "events each branch's log keeps for watchers to resume from (>= 1)"},
	{"watch-buffer", "HISTORYD_WATCH_BUFFER", strconv.Itoa(store.DefaultSubscriberBuffer), "commits a WatchBranch stream may have pending before it is ended as too slow, to resume from its cursor (1 to 65536)"},
	{"watch-max-streams", "HISTORYD_WATCH_MAX_STREAMS", strconv.Itoa(store.DefaultMaxSubscriptions), "WatchBranch streams open at once; past it WatchBranch is RESOURCE_EXHAUSTED (0 = no limit)"},
	{"watch-heartbeat", "HISTORYD_WATCH_HEARTBEAT", server.DefaultHeartbeat.String(), "idle interval between WatchBranch heartbeats, jittered by 10% (Go duration; 0 = none)"},
	{"watch-send-timeout", "HISTORYD_WATCH_SEND_TIMEOUT", server.DefaultSendTimeout.String(), "how long a WatchBranch stream may wait for its client to accept a frame before it is ended as too slow (Go duration, > 0)"},
	{"watch-buffer-bytes", "HISTORYD_WATCH_BUFFER_BYTES", sizeString(store.DefaultSubscriberBufferBytes), "bytes of commits (estimated heap) a WatchBranch stream may have pending before it is ended as too slow, to resume from its cursor; a larger commit is still taken when none is pending (a number with an optional KiB, MiB or GiB suffix, > 0)"},
}

func init() { settings = append(settings, historySettings...) }

// register defines the store's flags on fs with their defaults.
func (c *historyConfig) register(fs *flag.FlagSet) {
	s := historySettings
	c.MemoryBudget = mustByteSize(s[0].def)
	fs.Var(&c.MemoryBudget, s[0].flag, s[0].usage)
	fs.IntVar(&c.EventRetention, s[1].flag, mustInt(s[1].def), s[1].usage)
	fs.IntVar(&c.WatchBuffer, s[2].flag, mustInt(s[2].def), s[2].usage)
	fs.IntVar(&c.WatchMaxStreams, s[3].flag, mustInt(s[3].def), s[3].usage)
	fs.DurationVar(&c.WatchHeartbeat, s[4].flag, mustDuration(s[4].def), s[4].usage)
	fs.DurationVar(&c.WatchSendTimeout, s[5].flag, mustDuration(s[5].def), s[5].usage)
	c.WatchBufferBytes = mustByteSize(s[6].def)
	fs.Var(&c.WatchBufferBytes, s[6].flag, s[6].usage)
}

// defaultHistoryConfig is the configuration with every store flag at its default.
func defaultHistoryConfig() historyConfig {
	var c historyConfig
	c.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// validate checks the values that the flag types do not.
func (c historyConfig) validate() error {
	switch {
	case c.EventRetention < 1:
		return badValue("event-retention", "%d: must be at least 1", c.EventRetention)
	case c.WatchBuffer < 1:
		return badValue("watch-buffer", "%d: must be at least 1", c.WatchBuffer)
	case c.WatchBuffer > maxWatchBuffer:
		return checkMaximum("watch-buffer", int64(c.WatchBuffer))
	case c.WatchBufferBytes <= 0:
		return badValue("watch-buffer-bytes", "%d: must be positive, such as 2MiB", c.WatchBufferBytes)
	case c.WatchMaxStreams < 0:
		return badValue("watch-max-streams", "%d: must not be negative (0: no bound)", c.WatchMaxStreams)
	case c.WatchHeartbeat < 0:
		return badValue("watch-heartbeat", "%v: must not be negative (0s: none)", c.WatchHeartbeat)
	case c.WatchSendTimeout <= 0:
		return badValue("watch-send-timeout", "%v: must be positive, such as 10s", c.WatchSendTimeout)
	}
	return nil
}

// options are the memory store's options.
func (c historyConfig) options() []store.Option {
	return []store.Option{
		store.WithMemoryBudget(int64(c.MemoryBudget)), store.WithEventRetention(c.EventRetention),
		store.WithSubscriberBuffer(c.WatchBuffer), store.WithSubscriberBufferBytes(int64(c.WatchBufferBytes)),
		store.WithMaxSubscriptions(c.WatchMaxStreams),
	}
}

// streamOptions are the options of WatchBranch streams.
func (c historyConfig) streamOptions() []server.StreamOption {
	return []server.StreamOption{server.WithHeartbeat(c.WatchHeartbeat), server.WithSendTimeout(c.WatchSendTimeout)}
}

// byteSize is a flag.Value holding a number of bytes, written with an optional binary suffix.
type byteSize int64

var byteSuffixes = []struct {
	suffix string
	mult   int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// Set reads "1073741824", "1GiB", "512MiB", "64KiB" or "0".
func (b *byteSize) Set(s string) error {
	mult := int64(1)
	num := strings.TrimSpace(s)
	for _, sx := range byteSuffixes {
		if n, ok := strings.CutSuffix(num, sx.suffix); ok {
			num, mult = strings.TrimSpace(n), sx.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size: want a non-negative number of bytes, optionally with KiB, MiB or GiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// String writes the size with the largest suffix that divides it.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, sx := range byteSuffixes[:3] {
		if n != 0 && n%sx.mult == 0 {
			return strconv.FormatInt(n/sx.mult, 10) + sx.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// sizeString writes n as the flags read it, with the largest suffix that divides it.
func sizeString(n int64) string {
	b := byteSize(n)
	return b.String()
}

func mustByteSize(s string) byteSize {
	var b byteSize
	if err := b.Set(s); err != nil {
		panic("historyd: bad built-in size " + s) // a programming error in settings, never input
	}
	return b
}
