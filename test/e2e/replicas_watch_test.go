//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestReplicas' watchers (replicas_test.go): each follows one WatchBranch stream on the third
// replica from sequence 0 and is compared with what the writing replicas acknowledged.

// replicaWatcher follows one WatchBranch stream from sequence 0 and records what it was sent.
type replicaWatcher struct {
	branch string

	mu     sync.Mutex
	cursor uint64            // the last sequence received
	seen   map[uint64]string // each event's message id ("" for none), by sequence, first copy
	gaps   int               // sequences skipped
	dups   int               // events at or below the cursor
	ended  error             // what ended the stream, once it has ended
}

// run reads s until it ends, nudging progress after each frame.
func (w *replicaWatcher) run(s historyv1.HistoryService_WatchBranchClient, progress chan<- struct{}) {
	for {
		f, err := s.Recv()
		w.mu.Lock()
		if err != nil {
			w.ended = err
		} else {
			w.frame(f)
		}
		w.mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// frame applies one frame's events (a start or a heartbeat has none): each must come right after
// the cursor.
func (w *replicaWatcher) frame(f *historyv1.WatchBranchResponse) {
	for _, ev := range f.GetCommit().GetEvents() {
		seq := ev.GetSequence()
		if seq <= w.cursor {
			w.dups++
			continue
		}
		w.gaps += int(seq - w.cursor - 1)
		w.seen[seq] = ev.GetMessage().GetId()
		w.cursor = seq
	}
}

// waitWatchers waits, nudged by progress and bounded by startTimeout, until every watcher's cursor
// has reached its branch's head; it returns a description of each watcher whose stream ended
// first, or that was still short at the deadline.
func waitWatchers(watchers []*replicaWatcher, heads map[string]uint64, progress <-chan struct{}) []string {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	for {
		var short []string
		done := true
		for i, w := range watchers {
			w.mu.Lock()
			cursor, ended := w.cursor, w.ended
			w.mu.Unlock()
			if cursor >= heads[w.branch] {
				continue
			}
			if ended != nil {
				short = append(short, fmt.Sprintf("watcher %d of %s: its stream ended at %d, the head is %d: %v", i, w.branch, cursor, heads[w.branch], ended))
				continue
			}
			done = false
			short = append(short, fmt.Sprintf("watcher %d of %s: at %d after %v, the head is %d", i, w.branch, cursor, startTimeout, heads[w.branch]))
		}
		if done {
			return short
		}
		select {
		case <-progress:
		case <-deadline.C:
			return short
		}
	}
}

// compare counts the watcher's gaps and duplicates, and the acknowledged events it did not receive
// as acknowledged (lost); an event no acknowledged write made counts as a duplicate (the
// crash checker's rule: "written by no acknowledged write").
func (w *replicaWatcher) compare(acked map[uint64]string) (gaps, dups, lost int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gaps, dups = w.gaps, w.dups
	for seq, msg := range acked {
		if got, ok := w.seen[seq]; !ok || got != msg {
			lost++
		}
	}
	for seq := range w.seen {
		if _, ok := acked[seq]; !ok {
			dups++
		}
	}
	return gaps, dups, lost
}

// describe says how the watcher differs from what was acknowledged (a few sequences), or "".
func (w *replicaWatcher) describe(acked map[uint64]string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var diffs []string
	for _, seq := range slices.Sorted(maps.Keys(acked)) {
		if got, ok := w.seen[seq]; !ok || got != acked[seq] {
			diffs = append(diffs, fmt.Sprintf("sequence %d: received %q (present %v), acknowledged %q", seq, got, ok, acked[seq]))
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(w.seen)) {
		if _, ok := acked[seq]; !ok {
			diffs = append(diffs, fmt.Sprintf("sequence %d: received %q, acknowledged by no write", seq, w.seen[seq]))
		}
	}
	if len(diffs) == 0 && w.gaps == 0 && w.dups == 0 {
		return ""
	}
	return fmt.Sprintf("watcher of %s: %d gaps, %d repeats; %v", w.branch, w.gaps, w.dups, diffs[:min(len(diffs), 5)])
}
