package main

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/server"
)

// TestServingConfigDefaults: with no flags, authentication, TLS and metrics are off and the limits
// are server.DefaultLimits (issue 7: "all flags with documented defaults"; "--metrics-addr, off by
// default").
func TestServingConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := servingConfig{Limits: server.DefaultLimits()}
	if cfg.Serving != want {
		t.Errorf("defaults = %+v, want %+v", cfg.Serving, want)
	}
}

// TestServingConfigFlagsAndEnv: every serving setting is read from its flag and from its
// HISTORYD_* variable, the flag winning.
func TestServingConfigFlagsAndEnv(t *testing.T) {
	args := []string{
		"--auth-tokens-file", "/etc/historyd/tokens", "--tls-cert", "c.pem", "--tls-key", "k.pem",
		"--tls-client-ca", "ca.pem", "--metrics-addr", "127.0.0.1:9090",
		"--max-recv-msg-size", "1048576", "--max-concurrent-streams", "50", "--keepalive-min-time", "30s",
		"--keepalive-permit-without-stream", "--keepalive-time", "1m", "--keepalive-timeout", "5s",
		"--max-connection-idle", "1h", "--max-connection-age", "2h", "--max-connection-age-grace", "1m",
		"--stream-workers", "16", "--max-connections", "64", "--max-inflight-bytes", "64MiB",
		"--max-response-bytes", "8MiB", "--max-rendered-bytes", "512KiB", "--max-import-bytes", "1GiB",
		"--append-max-window", "64", "--request-body-timeout", "3s", "--stream-idle-timeout", "45s",
	}
	want := servingConfig{
		AuthTokensFile: "/etc/historyd/tokens", TLSCert: "c.pem", TLSKey: "k.pem", TLSClientCA: "ca.pem",
		MetricsAddr: "127.0.0.1:9090",
		Limits: server.Limits{
			MaxRecvMsgSize: 1 << 20, MaxConcurrentStreams: 50, KeepaliveMinTime: 30 * time.Second,
			KeepalivePermitWithoutStream: true, KeepaliveTime: time.Minute, KeepaliveTimeout: 5 * time.Second,
			MaxConnectionIdle: time.Hour, MaxConnectionAge: 2 * time.Hour, MaxConnectionAgeGrace: time.Minute,
			StreamWorkers: 16, MaxConnections: 64, MaxInflightBytes: 64 << 20, MaxResponseBytes: 8 << 20,
			MaxRenderedBytes: 512 << 10, MaxImportBytes: 1 << 30, MaxAppendWindow: 64,
			RequestBodyTimeout: 3 * time.Second, StreamIdleTimeout: 45 * time.Second,
		},
	}
	cfg, err := parseConfig(args, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Serving != want {
		t.Errorf("from flags = %+v\nwant %+v", cfg.Serving, want)
	}

	env := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		name := strings.TrimPrefix(args[i], "--")
		val := "true"
		if name != "keepalive-permit-without-stream" {
			val = args[i+1]
		} else {
			i-- // a bool flag takes no value
		}
		for _, s := range servingSettings {
			if s.flag == name {
				env[s.env] = val
			}
		}
	}
	if len(env) != len(servingSettings) {
		t.Fatalf("the test sets %d of the %d serving settings", len(env), len(servingSettings))
	}
	cfg, err = parseConfig(nil, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Serving != want {
		t.Errorf("from the environment = %+v\nwant %+v", cfg.Serving, want)
	}
	cfg, err = parseConfig([]string{"--max-concurrent-streams", "7"}, envOf(env))
	if err != nil || cfg.Serving.Limits.MaxConcurrentStreams != 7 {
		t.Errorf("flag over environment: %v, %v", cfg.Serving.Limits.MaxConcurrentStreams, err)
	}
}

// TestServingConfigInvalid: inconsistent TLS flags, a bad metrics address and out-of-range limits
// are usage errors naming what was wrong.
func TestServingConfigInvalid(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		mention string
	}{
		{"cert without key", []string{"--tls-cert", "c.pem"}, "--tls-key"},
		{"key without cert", []string{"--tls-key", "k.pem"}, "--tls-cert"},
		{"client CA without cert", []string{"--tls-client-ca", "ca.pem"}, "--tls-client-ca"},
		{"metrics address", []string{"--metrics-addr", "9090"}, "9090"},
		{"zero message size", []string{"--max-recv-msg-size", "0"}, "must be positive"},
		{"streams not a number", []string{"--max-concurrent-streams", "many"}, "max-concurrent-streams"},
		{"streams over uint32", []string{"--max-concurrent-streams", "4294967296"}, "max-concurrent-streams"},
		{"zero streams", []string{"--max-concurrent-streams", "0"}, "must be positive"},
		{"zero ping interval", []string{"--keepalive-min-time", "0s"}, "must be positive"},
		{"zero ping timeout", []string{"--keepalive-timeout", "0s"}, "must be positive"},
		{"negative age", []string{"--max-connection-age", "-1s"}, "must not be negative"},
		{"negative age grace", []string{"--max-connection-age-grace", "-1s"}, "must not be negative"},
		{"zero idle", []string{"--max-connection-idle", "0s"}, "must be positive"},
		{"negative window", []string{"--append-max-window", "-1"}, "must not be negative"},
		{"zero connections", []string{"--max-connections", "0"}, "must be positive"},
		// issue 11: "Refuse at start if --max-inflight-bytes < --max-recv-msg-size".
		{"in-flight below one request", []string{"--max-recv-msg-size", "8388608", "--max-inflight-bytes", "4MiB"}, "--max-inflight-bytes"},
		{"in-flight not a size", []string{"--max-inflight-bytes", "lots"}, "max-inflight-bytes"},
		// issue 11: the render cap is refused at start when above the response budget.
		{"render cap above the budget", []string{"--max-response-bytes", "1MiB", "--max-rendered-bytes", "2MiB"}, "--max-rendered-bytes"},
		{"zero response budget", []string{"--max-response-bytes", "0"}, "max-response-bytes"},
		{"response budget not a size", []string{"--max-response-bytes", "lots"}, "max-response-bytes"},
		{"zero import limit", []string{"--max-import-bytes", "0"}, "max-import-bytes"},
		// The slowloris review: each wait on the client is bounded; a zero bound would end every call.
		{"zero body timeout", []string{"--request-body-timeout", "0s"}, "must be positive"},
		{"negative idle timeout", []string{"--stream-idle-timeout", "-1s"}, "must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, envOf(nil))
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseConfig = %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			namesTheSetting(t, err, tc.args, nil)
		})
	}
}

// TestLimitFlags: every field of server.Limits has its flag in flagOfLimit, a serving setting, so
// that a refusal of Limits.Validate names the flag; each refusal Validate makes of a field out of
// range (zero or negative, each field in turn, and the two rules between fields) becomes a usage
// line that leads with that flag and names no Go field.
func TestLimitFlags(t *testing.T) {
	isSetting := map[string]bool{}
	for _, s := range servingSettings {
		isSetting[s.flag] = true
	}
	limitsType := reflect.TypeFor[server.Limits]()
	fields := map[string]bool{}
	for i := range limitsType.NumField() {
		name := limitsType.Field(i).Name
		fields[name] = true
		if f, ok := flagOfLimit[name]; !ok || !isSetting[f] {
			t.Errorf("server.Limits.%s has no flag in flagOfLimit (got %q): its refusal would not name one", name, f)
		}
	}
	for name := range flagOfLimit {
		if !fields[name] {
			t.Errorf("flagOfLimit maps %s, which is not a field of server.Limits", name)
		}
	}

	var refused []server.Limits
	for i := range limitsType.NumField() {
		for _, v := range []int64{0, -1} {
			l := server.DefaultLimits()
			switch fv := reflect.ValueOf(&l).Elem().Field(i); fv.Kind() {
			case reflect.Int, reflect.Int64:
				fv.SetInt(v)
			case reflect.Uint32:
				fv.SetUint(uint64(v + 1)) // 0, then 1
			}
			refused = append(refused, l)
		}
	}
	inflight, render, workers, window := server.DefaultLimits(), server.DefaultLimits(), server.DefaultLimits(), server.DefaultLimits()
	inflight.MaxInflightBytes = int64(inflight.MaxRecvMsgSize) - 1
	render.MaxRenderedBytes = render.MaxResponseBytes + 1
	workers.StreamWorkers = server.MaxStreamWorkers + 1
	window.MaxAppendWindow = server.MaxMaxAppendWindow + 1
	refused = append(refused, inflight, render, workers, window)
	seen := map[string]bool{}
	for _, l := range refused {
		err := l.Validate()
		var le *server.LimitError
		if !errors.As(err, &le) {
			continue // that value is valid
		}
		seen[le.Field] = true
		var ue *usageError
		if !errors.As(limitUsage(err), &ue) {
			t.Fatalf("%s refused: limitUsage = %v, want a *usageError", le.Field, limitUsage(err))
		}
		line := ue.line
		if lead := "--" + flagOfLimit[le.Field] + " "; !strings.HasPrefix(line, lead) {
			t.Errorf("%s refused: usage line %q does not lead with %q", le.Field, line, lead)
		}
		want := []string{flagOfLimit[le.Field]}
		if le.Other != "" {
			want = append(want, flagOfLimit[le.Other])
		}
		if !slices.Equal(ue.flags, want) {
			t.Errorf("%s refused: the usage error lists the flags %q, want %q", le.Field, ue.flags, want)
		}
		for f := range fields {
			if strings.Contains(line, f) {
				t.Errorf("%s refused: usage line %q names the field %s, not its flag", le.Field, line, f)
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d fields refused (%v): the test no longer reaches Validate's checks", len(seen), seen)
	}
}
