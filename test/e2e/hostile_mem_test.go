//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Issue 11's hostile suite measures the real process's memory from the outside, as an operator
// would, and runs each case at one of two sizes: the full sizes of the issue under `make hostile`
// (HISTORYD_HOSTILE=full), and scaled-down sizes under `make e2e` that still cross every bound.

// hostileFull reports whether the suite runs at the full sizes (`make hostile`).
func hostileFull() bool { return os.Getenv("HISTORYD_HOSTILE") == "full" }

// hostileSize picks the full size under `make hostile` and the scaled-down one otherwise.
func hostileSize[T any](full, scaled T) T {
	if hostileFull() {
		return full
	}
	return scaled
}

// memStat is a process's resident set now (VmRSS) and its peak since the last resetPeak (VmHWM),
// in bytes, read from /proc.
type memStat struct {
	RSS, Peak int64
}

func (m memStat) String() string {
	return fmt.Sprintf("rss %.1f MB, peak %.1f MB", float64(m.RSS)/1e6, float64(m.Peak)/1e6)
}

// procMem reads p's memory from /proc/PID/status.
func procMem(t *testing.T, p *proc) memStat {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading historyd's memory: %v", err)
	}
	defer f.Close()
	var m memStat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("parsing %s %q: %v", name, val, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading historyd's memory: %v", err)
	}
	if m.RSS == 0 || m.Peak == 0 {
		t.Fatalf("no VmRSS/VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	}
	return m
}

// resetPeak restarts p's peak-RSS measurement at its current RSS (Linux clear_refs 5), so that the
// next procMem's Peak is the high-water mark of what ran in between.
func resetPeak(t *testing.T, p *proc) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid)
	if err := os.WriteFile(path, []byte("5"), 0); err != nil {
		t.Fatalf("resetting historyd's peak RSS (%s): %v", path, err)
	}
}

// assertPeakWithin fails the test when p's peak RSS since base was taken rose more than bound
// bytes above base's RSS, and logs the figures either way.
func assertPeakWithin(t *testing.T, p *proc, base memStat, bound int64, what string) memStat {
	t.Helper()
	now := procMem(t, p)
	grew := now.Peak - base.RSS
	t.Logf("%s: idle %s; now %s; peak grew %.1f MB (bound %.1f MB)", what, base, now,
		float64(grew)/1e6, float64(bound)/1e6)
	if grew > bound {
		t.Errorf("%s: peak RSS grew %.1f MB above the idle %.1f MB, over the bound of %.1f MB",
			what, float64(grew)/1e6, float64(base.RSS)/1e6, float64(bound)/1e6)
	}
	return now
}
