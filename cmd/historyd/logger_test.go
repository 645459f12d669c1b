package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestNewLoggerFormats: json writes one JSON object a line; console writes text; the level filters.
func TestNewLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	l, err := newLogger("info", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hidden")
	l.Info("shown")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("json output %q: want exactly one line", buf.String())
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatalf("json line %q: %v", lines[0], err)
	}
	if obj["msg"] != "shown" || obj["level"] != "info" {
		t.Errorf("json line = %v", obj)
	}

	buf.Reset()
	l, err = newLogger("debug", "console", &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("visible")
	if out := buf.String(); !strings.Contains(out, "DEBUG\tvisible") {
		t.Errorf("console output = %q", out)
	}
}
