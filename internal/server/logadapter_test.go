package server

import (
	"context"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestZapLoggerFieldsDoNotPileUp: each Log call writes its own fields only; fields of an earlier
// call never reappear on a later one (docs/development.md#pinned-versions: the adapter must not accumulate fields).
func TestZapLoggerFieldsDoNotPileUp(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := zapLogger(zap.New(core))
	l.Log(context.Background(), logging.LevelInfo, "first", "a", 1, "shared", "one")
	l.Log(context.Background(), logging.LevelInfo, "second", "b", 2, "shared", "two")

	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2", len(entries))
	}
	want := []map[string]any{
		{"a": int64(1), "shared": "one"},
		{"b": int64(2), "shared": "two"},
	}
	for i, e := range entries {
		got := e.ContextMap()
		if len(got) != len(want[i]) || len(e.Context) != len(want[i]) {
			t.Errorf("entry %d (%s) fields = %v, want exactly %v", i, e.Message, got, want[i])
			continue
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("entry %d field %s = %v (%T), want %v", i, k, got[k], got[k], v)
			}
		}
	}
}

// TestZapLoggerMalformedFields: a non-string key or an odd field count is logged, never a panic.
func TestZapLoggerMalformedFields(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := zapLogger(zap.New(core))
	l.Log(context.Background(), logging.LevelWarn, "odd", 42, "x", "dangling")
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	got := entries[0].ContextMap()
	if got["42"] != "x" || got["dangling"] != "" {
		t.Errorf("fields = %v, want {42: x, dangling: \"\"}", got)
	}
	if entries[0].Level != zapcore.WarnLevel {
		t.Errorf("level = %v, want warn", entries[0].Level)
	}
}

// TestZapLevel maps the middleware's slog-style levels onto zap's.
func TestZapLevel(t *testing.T) {
	tests := []struct {
		in   logging.Level
		want zapcore.Level
	}{
		{logging.LevelDebug, zapcore.DebugLevel},
		{logging.LevelInfo, zapcore.InfoLevel},
		{logging.LevelWarn, zapcore.WarnLevel},
		{logging.LevelError, zapcore.ErrorLevel},
		{logging.LevelError + 4, zapcore.ErrorLevel},
		{logging.LevelDebug - 4, zapcore.DebugLevel},
	}
	for _, tc := range tests {
		if got := zapLevel(tc.in); got != tc.want {
			t.Errorf("zapLevel(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestZapLoggerLevelFilter: entries below the logger's level are dropped before fields are built.
func TestZapLoggerLevelFilter(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := zapLogger(zap.New(core))
	l.Log(context.Background(), logging.LevelDebug, "hidden", "k", "v")
	if n := logs.Len(); n != 0 {
		t.Errorf("%d entries for a debug line at info level, want 0", n)
	}
}
