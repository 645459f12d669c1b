package main

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestParseConfig: defaults, environment fallbacks, and flags winning over the environment
// (issue 2: flags with HISTORYD_* env fallbacks).
func TestParseConfig(t *testing.T) {
	defaults := config{Listen: "127.0.0.1:50051", LogLevel: "info", LogFormat: "json", GracePeriod: 10 * time.Second}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want config
	}{
		{name: "defaults", want: defaults},
		{
			name: "environment",
			env: map[string]string{
				"HISTORYD_LISTEN": "0.0.0.0:6000", "HISTORYD_LOG_LEVEL": "debug",
				"HISTORYD_LOG_FORMAT": "console", "HISTORYD_GRACE_PERIOD": "3s",
			},
			want: config{Listen: "0.0.0.0:6000", LogLevel: "debug", LogFormat: "console", GracePeriod: 3 * time.Second},
		},
		{
			name: "flags",
			args: []string{"--listen", "[::1]:7000", "-log-level=warn", "--log-format=console", "--grace-period", "250ms"},
			want: config{Listen: "[::1]:7000", LogLevel: "warn", LogFormat: "console", GracePeriod: 250 * time.Millisecond},
		},
		{
			name: "flag wins over environment",
			args: []string{"--listen", "127.0.0.1:1", "--grace-period", "0s"},
			env:  map[string]string{"HISTORYD_LISTEN": "127.0.0.1:2", "HISTORYD_GRACE_PERIOD": "5s", "HISTORYD_LOG_LEVEL": "error"},
			want: config{Listen: "127.0.0.1:1", LogLevel: "error", LogFormat: "json", GracePeriod: 0},
		},
		{
			name: "empty environment value is unset",
			env:  map[string]string{"HISTORYD_LISTEN": ""},
			want: defaults,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig(tc.args, envOf(tc.env))
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if tc.want.Exchange == (exchangeConfig{}) { // the Exchange's settings: config_exchange_test.go
				tc.want.Exchange = defaultExchangeConfig()
			}
			if tc.want.History == (historyConfig{}) { // the branch store's settings: config_history_test.go
				tc.want.History = defaultHistoryConfig()
			}
			if tc.want.Store == (storeConfig{}) { // the engine's settings: config_store_test.go
				tc.want.Store = defaultStoreConfig()
			}
			if tc.want.Serving == (servingConfig{}) { // auth, TLS, limits, metrics: config_serving_test.go
				tc.want.Serving = defaultServingConfig()
			}
			if tc.want.GCPercent == "" { // the collector's GOGC: gc_test.go
				tc.want.GCPercent = gcSetting.def
			}
			if tc.want.MemoryLimit == "" { // the runtime's soft memory limit: memlimit_test.go
				tc.want.MemoryLimit = memLimitSetting.def
			}
			if got != tc.want {
				t.Errorf("parseConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestParseConfigInvalid: every unknown or invalid value is a usage error naming what was wrong.
func TestParseConfigInvalid(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		mention string
	}{
		{name: "unknown flag", args: []string{"--port", "1"}, mention: "port"},
		{name: "positional argument", args: []string{"serve"}, mention: "serve"},
		{name: "listen without port", args: []string{"--listen", "localhost"}, mention: "localhost"},
		{name: "log level", args: []string{"--log-level", "verbose"}, mention: "verbose"},
		{name: "log format", args: []string{"--log-format", "xml"}, mention: "xml"},
		{name: "grace period syntax", args: []string{"--grace-period", "ten"}, mention: "grace-period"},
		{name: "negative grace period", args: []string{"--grace-period", "-1s"}, mention: "-1s"},
		{name: "env grace period", env: map[string]string{"HISTORYD_GRACE_PERIOD": "soon"}, mention: "HISTORYD_GRACE_PERIOD"},
		{name: "env log format", env: map[string]string{"HISTORYD_LOG_FORMAT": "text"}, mention: "text"},
		{name: "missing flag value", args: []string{"--listen"}, mention: "listen"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, envOf(tc.env))
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseConfig = %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

// TestParseConfigHelp: -h asks for help, which is not a usage error.
func TestParseConfigHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		if _, err := parseConfig([]string{arg}, envOf(nil)); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parseConfig(%s) = %v, want flag.ErrHelp", arg, err)
		}
	}
}

// TestUsageNamesEverySetting: the usage text lists each flag with its variable and default.
func TestUsageNamesEverySetting(t *testing.T) {
	u := usage()
	for _, s := range settings {
		for _, want := range []string{"--" + s.flag, s.env, s.def} {
			if !strings.Contains(u, want) {
				t.Errorf("usage does not mention %q", want)
			}
		}
	}
}

// namesTheSetting checks that a usage error names what the operator gave (README: "one line that
// names the flag"): a flag of args, and every variable of env, which is where the value came from.
func namesTheSetting(t *testing.T, err error, args []string, env map[string]string) {
	t.Helper()
	if err == nil {
		return // the caller reports the missing error
	}
	msg := err.Error()
	var flags []string
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			flags = append(flags, "--"+name)
		}
	}
	if len(flags) > 0 && !slices.ContainsFunc(flags, func(f string) bool { return strings.Contains(msg, f) }) {
		t.Errorf("usage error %q names none of the flags given, %q", msg, flags)
	}
	for v := range env {
		if !strings.Contains(msg, v) {
			t.Errorf("usage error %q does not name %s, which gave the value", msg, v)
		}
	}
}
