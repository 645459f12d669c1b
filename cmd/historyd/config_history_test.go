package main

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// TestHistoryConfig: the branch store's settings have documented defaults (issue 4: a memory budget
// flag with a sensible default), HISTORYD_* fallbacks, and flags that win over the environment.
func TestHistoryConfig(t *testing.T) {
	def := historyConfig{
		MemoryBudget: store.DefaultMemoryBudget, EventRetention: store.DefaultEventRetention,
		WatchBuffer: store.DefaultSubscriberBuffer, WatchMaxStreams: store.DefaultMaxSubscriptions,
		WatchHeartbeat: server.DefaultHeartbeat, WatchSendTimeout: server.DefaultSendTimeout,
		WatchBufferBytes: store.DefaultSubscriberBufferBytes,
	}
	with := func(f func(*historyConfig)) historyConfig {
		c := def
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want historyConfig
	}{
		{"defaults", nil, nil, def},
		{"environment", nil, map[string]string{"HISTORYD_MEMORY_BUDGET": "512MiB", "HISTORYD_EVENT_RETENTION": "7"},
			with(func(c *historyConfig) { c.MemoryBudget, c.EventRetention = 512<<20, 7 })},
		{"flags win", []string{"--memory-budget", "64KiB", "--event-retention", "9"}, map[string]string{"HISTORYD_MEMORY_BUDGET": "1GiB"},
			with(func(c *historyConfig) { c.MemoryBudget, c.EventRetention = 64<<10, 9 })},
		{"plain bytes and no limit", []string{"--memory-budget", "0"}, nil, with(func(c *historyConfig) { c.MemoryBudget = 0 })},
		// Issue 5: the WatchBranch buffer, stream limit, heartbeat and send timeout.
		{"watch environment", nil, map[string]string{"HISTORYD_WATCH_BUFFER": "8", "HISTORYD_WATCH_MAX_STREAMS": "100",
			"HISTORYD_WATCH_HEARTBEAT": "2s", "HISTORYD_WATCH_SEND_TIMEOUT": "3s", "HISTORYD_WATCH_BUFFER_BYTES": "1MiB"},
			with(func(c *historyConfig) {
				c.WatchBuffer, c.WatchMaxStreams, c.WatchHeartbeat, c.WatchSendTimeout = 8, 100, 2*time.Second, 3*time.Second
				c.WatchBufferBytes = 1 << 20
			})},
		{"watch flags win", []string{"--watch-buffer", "1", "--watch-max-streams", "0", "--watch-heartbeat", "0s", "--watch-buffer-bytes", "4096"},
			map[string]string{"HISTORYD_WATCH_BUFFER": "8", "HISTORYD_WATCH_BUFFER_BYTES": "1MiB"},
			with(func(c *historyConfig) {
				c.WatchBuffer, c.WatchMaxStreams, c.WatchHeartbeat, c.WatchBufferBytes = 1, 0, 0, 4096
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The byte budgets are the memory engine's: under another --store they are refused.
			env := map[string]string{"HISTORYD_STORE": "memory"}
			maps.Copy(env, tc.env)
			cfg, err := parseConfig(tc.args, envOf(env))
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if cfg.History != tc.want {
				t.Errorf("history config = %+v, want %+v", cfg.History, tc.want)
			}
		})
	}
}

// TestHistoryConfigInvalid: a malformed size or a retention below 1 is a usage error.
func TestHistoryConfigInvalid(t *testing.T) {
	for _, args := range [][]string{
		{"--memory-budget", "lots"}, {"--memory-budget", "-1"}, {"--memory-budget", "1TB"}, {"--event-retention", "0"},
		{"--watch-buffer", "0"}, {"--watch-buffer-bytes", "0"}, {"--watch-buffer-bytes", "1TB"}, {"--watch-max-streams", "-1"}, {"--watch-heartbeat", "-1s"}, {"--watch-send-timeout", "0s"},
	} {
		if _, err := parseConfig(args, envOf(nil)); !errors.Is(err, errUsage) {
			t.Errorf("parseConfig(%v) = %v, want a usage error", args, err)
		}
	}
	var b byteSize
	if err := b.Set("3GiB"); err != nil || b.String() != "3GiB" {
		t.Errorf("3GiB -> %v %v", b.String(), err)
	}
}
