package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEConfigurationTable: every setting has its row in the README's configuration table,
// with its environment variable and its default ("—" for none), so the table cannot fall behind
// the flags (issue 7: "the new flags in the configuration table").
func TestREADMEConfigurationTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `--") {
			flag, _, _ := strings.Cut(strings.TrimPrefix(line, "| `--"), "`")
			rows[flag] = line
		}
	}
	for _, s := range settings {
		row, ok := rows[s.flag]
		if !ok {
			t.Errorf("README's configuration table has no row for --%s", s.flag)
			continue
		}
		def := "`" + s.def + "`"
		if s.def == "" {
			def = "—"
		}
		if want := "| `--" + s.flag + "` | `" + s.env + "` | " + def + " |"; !strings.HasPrefix(row, want) {
			t.Errorf("README row %q, want it to start %q", row, want)
		}
	}
}
