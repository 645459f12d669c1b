package main

import (
	"context"
	"os"
	"path/filepath"
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

func readREADME(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(readme)
}

// TestREADMEUsageError: the usage error the README shows is the one historyd prints, on one line
// (issue 19: "README output differs from the server's").
func TestREADMEUsageError(t *testing.T) {
	_, block, ok := strings.Cut(readREADME(t), "<!-- readme-test: usage-error -->\n```\n")
	if !ok {
		t.Fatal("README has no usage-error block")
	}
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	command, ok := strings.CutPrefix(lines[0], "$ bin/historyd ")
	if !ok || len(lines) != 2 {
		t.Fatalf("usage-error block %q, want a `$ bin/historyd ...` line and its output", block)
	}
	var stdout, stderr strings.Builder
	if code := runIO(context.Background(), signals{}, strings.Fields(command), envOf(nil), &stdout, &stderr); code != 2 {
		t.Errorf("historyd %s exited %d, want 2", command, code)
	}
	if got := strings.TrimSuffix(stderr.String(), "\n"); got != lines[1] {
		t.Errorf("historyd %s printed\n%s\nREADME shows\n%s", command, got, lines[1])
	}
}

// TestREADMENamesSubcommands: the README's configuration section names every subcommand the help
// lists.
func TestREADMENamesSubcommands(t *testing.T) {
	readme := readREADME(t)
	for _, c := range subcommands {
		if !strings.Contains(readme, "`historyd "+c.name) {
			t.Errorf("README never shows `historyd %s`", c.name)
		}
	}
}

// TestREADMEMetricsExampleFreePort: the metrics example does not listen on 50051 nor serve from
// ./data, which the quick start's `make run` already holds (issues 19, 14).
func TestREADMEMetricsExampleFreePort(t *testing.T) {
	_, section, ok := strings.Cut(readREADME(t), "## Metrics")
	if !ok {
		t.Fatal("README has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	found := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "bin/historyd ") {
			continue
		}
		found = true
		args, _, _ := strings.Cut(strings.TrimPrefix(line, "bin/historyd "), "&") // the command, without & and its comment
		cfg, err := parseConfig(strings.Fields(args), envOf(nil))
		if err != nil {
			t.Errorf("README's metrics command %q does not parse: %v", line, err)
			continue
		}
		if strings.HasSuffix(cfg.Listen, ":50051") {
			t.Errorf("README's metrics command %q listens on %s, which make run holds", line, cfg.Listen)
		}
		// Issue 14: make run's sqlite engine also holds ./data; a second server there is refused.
		if cfg.Store.Engine == storeSQLite && filepath.Clean(cfg.Store.DataDir) == "data" {
			t.Errorf("README's metrics command %q serves from ./data, which make run holds", line)
		}
	}
	if !found {
		t.Error("README's Metrics section runs no bin/historyd")
	}
}
