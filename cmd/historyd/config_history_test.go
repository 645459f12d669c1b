package main

import (
	"errors"
	"testing"

	"github.com/historyd/historyd/internal/store"
)

// TestHistoryConfig: the branch store's settings have documented defaults (issue 4: a memory budget
// flag with a sensible default), HISTORYD_* fallbacks, and flags that win over the environment.
func TestHistoryConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want historyConfig
	}{
		{"defaults", nil, nil, historyConfig{MemoryBudget: store.DefaultMemoryBudget, EventRetention: store.DefaultEventRetention}},
		{"environment", nil, map[string]string{"HISTORYD_MEMORY_BUDGET": "512MiB", "HISTORYD_EVENT_RETENTION": "7"},
			historyConfig{MemoryBudget: 512 << 20, EventRetention: 7}},
		{"flags win", []string{"--memory-budget", "64KiB", "--event-retention", "9"}, map[string]string{"HISTORYD_MEMORY_BUDGET": "1GiB"},
			historyConfig{MemoryBudget: 64 << 10, EventRetention: 9}},
		{"plain bytes and no limit", []string{"--memory-budget", "0"}, nil, historyConfig{MemoryBudget: 0, EventRetention: store.DefaultEventRetention}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, envOf(tc.env))
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
