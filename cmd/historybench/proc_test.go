package main

import (
	"os"
	"testing"
	"time"
)

// TestProcTimes checks the /proc reading the CPU figures rest on: the start time names the process
// (the same on every read), and the CPU time grows with work done.
func TestProcTimes(t *testing.T) {
	cpu0, start0, err := procTimes(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	// Work until /proc shows more CPU time (it counts in ticks of 10 ms), for at most 10 s.
	x, cpu1, start1 := 0, cpu0, start0
	for deadline := time.Now().Add(10 * time.Second); cpu1 <= cpu0 && time.Now().Before(deadline); {
		for i := range 10_000_000 {
			x ^= i
		}
		if cpu1, start1, err = procTimes(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if start0 <= 0 || start1 != start0 {
		t.Errorf("start time %d, then %d: want the same, positive", start0, start1)
	}
	if cpu1 <= cpu0 {
		t.Errorf("CPU time %v, then %v after 10 s of a busy loop (x=%d): want it to grow", cpu0, cpu1, x)
	}
}

// TestPostgresCPUSince checks that a process the first reading did not know (or knew under another
// start time: its pid reused) counts with all its CPU time, and a known one with its growth alone.
func TestPostgresCPUSince(t *testing.T) {
	now := postgresProcs()
	if len(now) == 0 {
		t.Skip("no process named postgres on this machine")
	}
	var pid int
	var p pgProc
	for pid, p = range now {
		break
	}
	reused := map[int]pgProc{pid: {cpu: p.cpu + 1e12, start: p.start - 1}}
	if got := postgresCPUSince(reused); got < p.cpu {
		t.Errorf("a reused pid counted %v, want at least its whole %v", got, p.cpu)
	}
	same := map[int]pgProc{}
	var total int64
	for k, v := range now {
		same[k] = v
		total += int64(v.cpu)
	}
	if total < 2e8 {
		return // too little CPU spent so far to tell growth from totals
	}
	if got := postgresCPUSince(same); int64(got) >= total/2 {
		t.Errorf("known processes counted %v, want their growth since, far under their total %v", got, time.Duration(total))
	}
}
