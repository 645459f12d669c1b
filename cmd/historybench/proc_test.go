package main

import (
	"os"
	"testing"
	"time"
)

// TestProcTimes checks the /proc reading the CPU figures rest on: the start time names the process
// (the same on every read), and the CPU time grows with work done.
func TestProcTimes(t *testing.T) {
	p0, err := procTimes(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	// Work until /proc shows more CPU time (it counts in ticks of 10 ms), for at most 10 s.
	x, p1 := 0, p0
	for deadline := time.Now().Add(10 * time.Second); p1.cpu <= p0.cpu && time.Now().Before(deadline); {
		for i := range 10_000_000 {
			x ^= i
		}
		if p1, err = procTimes(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if p0.start <= 0 || p1.start != p0.start {
		t.Errorf("start time %d, then %d: want the same, positive", p0.start, p1.start)
	}
	if p1.cpu <= p0.cpu {
		t.Errorf("CPU time %v, then %v after 10 s of a busy loop (x=%d): want it to grow", p0.cpu, p1.cpu, x)
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
	var p procSample
	for pid, p = range now {
		break
	}
	reused := map[int]procSample{pid: {cpu: p.cpu + 1e12, start: p.start - 1}}
	if got := postgresCPUSince(reused); got < p.cpu {
		t.Errorf("a reused pid counted %v, want at least its whole %v", got, p.cpu)
	}
	same := map[int]procSample{}
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
