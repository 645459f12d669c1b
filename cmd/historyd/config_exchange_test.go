package main

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
)

// TestExchangeConfig: the Exchange's settings have documented defaults, HISTORYD_* fallbacks, and
// flags that win over the environment (issue 6: limits, background collection, subscriber buffer,
// heartbeat as flags with HISTORYD_* env).
func TestExchangeConfig(t *testing.T) {
	defaults := exchangeConfig{
		MaxOutbox: exchange.DefaultMaxOutbox, MaxInbox: exchange.DefaultMaxInbox,
		MaxDeadLetters: exchange.DefaultMaxDeadLetters, SubscriberBuffer: exchange.DefaultSubscriberBuffer,
		Heartbeat: server.DefaultHeartbeat, SendTimeout: server.DefaultSendTimeout,
		MaxBytes: exchange.DefaultByteBudget, MaxStreams: exchange.DefaultMaxSubscriptions,
		MaxAttempts: exchange.DefaultMaxAttempts, VisibilityTimeout: exchange.DefaultVisibility,
		SubscriberBufferBytes: exchange.DefaultSubscriberBufferBytes,
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want exchangeConfig
	}{
		{name: "defaults", want: defaults},
		{
			name: "environment",
			env: map[string]string{
				"HISTORYD_EXCHANGE_MAX_OUTBOX": "5", "HISTORYD_EXCHANGE_MAX_INBOX": "6",
				"HISTORYD_EXCHANGE_MAX_DEAD_LETTERS": "1", "HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER": "7",
				"HISTORYD_EXCHANGE_BACKGROUND_COLLECT": "true", "HISTORYD_EXCHANGE_HEARTBEAT": "2s",
				"HISTORYD_EXCHANGE_SEND_TIMEOUT": "3s", "HISTORYD_EXCHANGE_MAX_BYTES": "1048576",
				"HISTORYD_INBOX_MAX_STREAMS": "8", "HISTORYD_EXCHANGE_MAX_ATTEMPTS": "9",
				"HISTORYD_EXCHANGE_VISIBILITY_TIMEOUT": "1m", "HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER_BYTES": "1MiB",
			},
			want: exchangeConfig{MaxOutbox: 5, MaxInbox: 6, MaxDeadLetters: 1, SubscriberBuffer: 7,
				BackgroundCollect: true, Heartbeat: 2 * time.Second, SendTimeout: 3 * time.Second,
				MaxBytes: 1 << 20, MaxStreams: 8, MaxAttempts: 9, VisibilityTimeout: time.Minute,
				SubscriberBufferBytes: 1 << 20},
		},
		{
			name: "flags win",
			args: []string{"--exchange-max-outbox", "9", "--exchange-background-collect=false", "--exchange-heartbeat", "0s",
				"--exchange-max-bytes", "0", "--inbox-max-streams", "3", "--exchange-max-attempts", "1000",
				"--exchange-visibility-timeout", "1ms", "--exchange-subscriber-buffer-bytes", "4096"},
			env: map[string]string{"HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER_BYTES": "1MiB", "HISTORYD_EXCHANGE_MAX_OUTBOX": "5", "HISTORYD_EXCHANGE_BACKGROUND_COLLECT": "true",
				"HISTORYD_EXCHANGE_MAX_BYTES": "7", "HISTORYD_INBOX_MAX_STREAMS": "7", "HISTORYD_EXCHANGE_MAX_ATTEMPTS": "2",
				"HISTORYD_EXCHANGE_VISIBILITY_TIMEOUT": "12h"},
			want: func() exchangeConfig {
				c := defaults
				c.MaxOutbox, c.Heartbeat, c.MaxBytes, c.MaxStreams = 9, 0, 0, 3
				c.MaxAttempts, c.VisibilityTimeout = 1000, time.Millisecond
				c.SubscriberBufferBytes = 4096
				return c
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The byte budgets are the memory engine's: under another --store they are refused.
			env := map[string]string{"HISTORYD_STORE": "memory"}
			maps.Copy(env, tc.env)
			cfg, err := parseConfig(tc.args, envOf(env))
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if cfg.Exchange != tc.want {
				t.Errorf("exchange config = %+v, want %+v", cfg.Exchange, tc.want)
			}
		})
	}
}

// TestExchangeConfigInvalid: out-of-range Exchange values are usage errors naming the value.
func TestExchangeConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		mention string
	}{
		{args: []string{"--exchange-max-outbox", "-1"}, mention: "-1"},
		{args: []string{"--exchange-max-inbox", "lots"}, mention: "exchange-max-inbox"},
		{args: []string{"--exchange-subscriber-buffer", "0"}, mention: "must be at least 1"},
		{args: []string{"--exchange-subscriber-buffer-bytes", "0"}, mention: "must be positive"},
		{args: []string{"--exchange-subscriber-buffer-bytes", "lots"}, mention: "exchange-subscriber-buffer-bytes"},
		// Review finding MINOR 3: 0 used to mean "no bound"; docs/design.md#exchange says bounded.
		{args: []string{"--exchange-max-dead-letters", "0"}, mention: "must be at least 1"},
		{env: map[string]string{"HISTORYD_EXCHANGE_MAX_DEAD_LETTERS": "-3"}, mention: "must be at least 1"},
		{args: []string{"--exchange-send-timeout", "0s"}, mention: "must be positive"},
		{args: []string{"--exchange-heartbeat", "-1s"}, mention: "heartbeat"},
		{args: []string{"--exchange-max-bytes", "-1"}, mention: "must not be negative"},
		{args: []string{"--inbox-max-streams", "-1"}, mention: "must not be negative"},
		{args: []string{"--max-response-bytes", "-1"}, mention: "max-response-bytes"},
		// issue 18: max_attempts 1..1000 and a lease length of 1ms..12h, as Register's own.
		{args: []string{"--exchange-max-attempts", "0"}, mention: "1 to 1000"},
		{args: []string{"--exchange-max-attempts", "1001"}, mention: "1 to 1000"},
		{env: map[string]string{"HISTORYD_EXCHANGE_MAX_ATTEMPTS": "-1"}, mention: "1 to 1000"},
		{args: []string{"--exchange-visibility-timeout", "0s"}, mention: "1ms to 12h0m0s"},
		{args: []string{"--exchange-visibility-timeout", "999us"}, mention: "1ms to 12h0m0s"},
		{args: []string{"--exchange-visibility-timeout", "12h0m1s"}, mention: "1ms to 12h0m0s"},
		{env: map[string]string{"HISTORYD_EXCHANGE_VISIBILITY_TIMEOUT": "30"}, mention: "HISTORYD_EXCHANGE_VISIBILITY_TIMEOUT"},
		{env: map[string]string{"HISTORYD_EXCHANGE_BACKGROUND_COLLECT": "maybe"}, mention: "HISTORYD_EXCHANGE_BACKGROUND_COLLECT"},
	} {
		_, err := parseConfig(tc.args, envOf(tc.env))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("parseConfig(%v, %v) = %v, want a usage error mentioning %q", tc.args, tc.env, err, tc.mention)
		}
		namesTheSetting(t, err, tc.args, tc.env)
	}
}

// TestUsageListsExchangeSettings: every Exchange setting is in the usage text with its variable.
func TestUsageListsExchangeSettings(t *testing.T) {
	u := usage()
	for _, s := range exchangeSettings {
		if !strings.Contains(u, "--"+s.flag) || !strings.Contains(u, s.env) {
			t.Errorf("usage lacks --%s / %s", s.flag, s.env)
		}
	}
}

// TestExchangeLeaseDefaultsReachTheEngine: --exchange-max-attempts and --exchange-visibility-timeout
// become the lease settings of owners registered without their own, for every engine (issue 18:
// "max_attempts and the default visibility timeout are owner options set at Register (with server
// defaults as flags)"): the options every engine is built with resolve to them.
func TestExchangeLeaseDefaultsReachTheEngine(t *testing.T) {
	cfg, err := parseConfig([]string{"--exchange-max-attempts", "7", "--exchange-visibility-timeout", "90s"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := exchange.ResolveOptions(cfg.Exchange.options(zap.NewNop())...)
	if got.MaxAttempts != 7 || got.Visibility != 90*time.Second {
		t.Errorf("resolved lease defaults = %d, %v; want 7, 1m30s", got.MaxAttempts, got.Visibility)
	}
}

// TestLeaseRecheckOnlyForPostgres (review of issue 18, S3): a leasing SubscribeInbox held at its
// max_in_flight leases again on its own only where another replica's Ack can free its room
// unheard (--store postgres); with memory and sqlite every Ack goes through this process and
// wakes its streams, and a recheck would be a write transaction four times a second per stream.
func TestLeaseRecheckOnlyForPostgres(t *testing.T) {
	for store, want := range map[string]time.Duration{storePostgres: server.DefaultLeaseRecheck, storeSQLite: 0, storeMemory: 0} {
		if got := leaseRecheck(store); got != want {
			t.Errorf("leaseRecheck(%s) = %v, want %v", store, got, want)
		}
	}
	if server.DefaultLeaseRecheck <= 0 {
		t.Errorf("server.DefaultLeaseRecheck = %v, want a positive interval", server.DefaultLeaseRecheck)
	}
}
