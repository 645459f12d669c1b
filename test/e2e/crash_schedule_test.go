//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The crash harness's kill schedule (crash_test.go; issue 15: "kill -9 at random moments"): what
// each cycle's load does and when its kill comes. The sqlite writer checkpoints its WAL itself
// (internal/store/sqlite/checkpoint.go): passively after about 4000 pages written, which a few
// hundred milliseconds of load may reach (0-4 per cycle when it was 1000 pages); restarting when a
// passive one finds the WAL over 16,000 pages, the WAL the last kill left included (10-14 a 30-cycle
// run); truncating once writes have paused
// for truncateIdle (1 s), which a steady load never does. So in each block of crashBlock cycles the
// schedule makes one cycle a pause (writes stop for crashMinPause-crashMaxPause while the watchers
// stay open, and the kill comes at the pause's end or shortly after the writes resume: about when
// the idle truncation runs, or after it) and one a burst (writes for crashMinBurst-crashMaxBurst
// with crashReaders looping: many passive checkpoints, and at times a restarting one). The rest
// write for crashMinLoad-crashMaxLoad.
//
// The schedule is drawn from a stream of its own (crashStream), which nothing the server answers
// feeds: a seed replays it exactly.

// crashCycleKind is what a cycle's load does before the kill.
type crashCycleKind int

const (
	crashSteady crashCycleKind = iota // writes until the kill
	crashPause                        // writes, a pause with the watchers open, the kill in or right after it
	crashBurst                        // writes for longer, until the kill
)

// Bounds of the schedule. A pause or a burst adds about 1.5 s to a cycle of about 0.35 s, so one
// of each per block of 10 keeps make e2e's 30 cycles near 20 s a mode on a loaded 2-core machine
// (issue 15: "within 90 seconds"), and still has each run kill three times after a truncation.
const (
	crashBlock    = 10
	crashMinLoad  = 50 * time.Millisecond
	crashMaxLoad  = 400 * time.Millisecond
	crashMinPause = 1000 * time.Millisecond // truncateIdle: a pause this long truncates the WAL
	crashMaxPause = 1600 * time.Millisecond
	crashMaxAfter = 200 * time.Millisecond // writes after a pause before the kill, into the truncated WAL
	crashMinBurst = 1200 * time.Millisecond
	crashMaxBurst = 2000 * time.Millisecond
)

// crashKill is one cycle's schedule.
type crashKill struct {
	kind  crashCycleKind
	load  time.Duration // writes before the kill, or before the pause
	pause time.Duration // crashPause: the writers held, the watchers open
	after time.Duration // crashPause: writes after the pause before the kill; 0 kills in the pause
}

func (k crashKill) String() string {
	switch k.kind {
	case crashPause:
		if k.after == 0 {
			return fmt.Sprintf("pause: writes %v, paused %v, killed in the pause", k.load, k.pause)
		}
		return fmt.Sprintf("pause: writes %v, paused %v, writes %v, killed", k.load, k.pause, k.after)
	case crashBurst:
		return fmt.Sprintf("burst: writes %v, killed", k.load)
	}
	return fmt.Sprintf("writes %v, killed", k.load)
}

// crashSchedule draws each cycle's crashKill.
type crashSchedule struct {
	rng          *rand.Rand
	cycles       int // the run's kills
	pause, burst int // the cycles of the current block that pause and burst
}

// Streams of a run's seed (rand.NewPCG(seed, stream)): the schedule, the choice of branches to
// watch, and one per writer. Each sync mode has its own streams.
const (
	crashScheduleStream = iota
	crashWatchStream
	crashWriterStream // + the writer's index
)

// crashStream is the PCG stream of kind in sync mode number mode.
func crashStream(mode int, kind int) uint64 { return uint64(mode)<<8 | uint64(kind) }

func newCrashSchedule(seed uint64, mode, cycles int) *crashSchedule {
	return &crashSchedule{rng: rand.New(rand.NewPCG(seed, crashStream(mode, crashScheduleStream))), cycles: cycles}
}

// next returns cycle's schedule (cycles are drawn in order, from 0). A block cut short by the end
// of the run still has its pause: a one-cycle run pauses.
func (s *crashSchedule) next(cycle int) crashKill {
	if cycle%crashBlock == 0 {
		n := min(crashBlock, s.cycles-cycle)
		perm := s.rng.Perm(n)
		s.pause, s.burst = cycle+perm[0], -1
		if n > 1 {
			s.burst = cycle + perm[1]
		}
	}
	switch cycle {
	case s.pause:
		k := crashKill{kind: crashPause, load: s.between(crashMinLoad, crashMaxLoad), pause: s.between(crashMinPause, crashMaxPause)}
		if s.rng.IntN(3) > 0 { // two in three resume the writes before the kill
			k.after = s.between(time.Millisecond, crashMaxAfter)
		}
		return k
	case s.burst:
		return crashKill{kind: crashBurst, load: s.between(crashMinBurst, crashMaxBurst)}
	}
	return crashKill{kind: crashSteady, load: s.between(crashMinLoad, crashMaxLoad)}
}

// between draws a duration in [lo, hi), to the millisecond.
func (s *crashSchedule) between(lo, hi time.Duration) time.Duration {
	return (lo + time.Duration(s.rng.Int64N(int64(hi-lo)))).Round(time.Millisecond)
}

// crashHold stops the writers between two writes for a pause; a write in flight finishes.
type crashHold struct {
	mu   sync.Mutex
	gate chan struct{} // nil while the writers run; closed when the hold ends
}

func (h *crashHold) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate = make(chan struct{})
}

func (h *crashHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
}

// wait returns once the writers may write: at once unless held.
func (h *crashHold) wait() {
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	if g != nil {
		<-g
	}
}

// crashWait lets the load run for d: the kill's moment is the point of the harness, not a
// synchronisation.
func crashWait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}
