package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The whole tool runs end to end with -quick (every scenario, tiny): it builds historyd, starts it,
// measures, prints the table and writes the results file with the machine's core count and the
// date (issue 8). The figures of so short a run mean nothing; the rows and the file's shape do.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs historyd")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // the tool builds ./cmd/historyd from the module root, as make bench runs it
	out := filepath.Join(t.TempDir(), "results.md")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"-quick", "-profile=false", "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("historybench -quick exited %d:\n%s", code, stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"AddMessage / Health.Check throughput, concurrency 1",
		"AddMessage / Health.Check throughput, concurrency 50",
		"ListMessages page of 100 latency",
		"AddMessage throughput with 5 watchers / with none",
		"Exchange Send+Collect, direct",
		"Exchange Send+Collect, broadcast",
		"resident memory per stored 1 KB message",
		"cores (GOMAXPROCS",
		"- date: ",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results file lacks %q:\n%s", want, md)
		}
		if !strings.HasPrefix(want, "-") && !strings.Contains(want, "cores") && !strings.Contains(stdout.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, stdout.String())
		}
	}
}
