package server

import (
	"strings"
	"testing"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Frames for the validator's own test.
func vStart(after, head uint64) *historyv1.WatchBranchResponse {
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Start{Start: &historyv1.WatchStart{AfterSequence: after, HeadSequence: head}}}
}

func vCommit(first, last uint64, seqs ...uint64) *historyv1.WatchBranchResponse {
	c := &historyv1.BranchCommit{FirstSequence: first, LastSequence: last}
	for _, s := range seqs {
		c.Events = append(c.Events, &historyv1.BranchEvent{Sequence: s, Kind: historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED})
	}
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: c}}
}

func vBeat(head uint64) *historyv1.WatchBranchResponse {
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Heartbeat{Heartbeat: &historyv1.WatchHeartbeat{HeadSequence: head}}}
}

// TestWatchValidatorCatches: the validator that every watch test relies on reports each broken
// guarantee (a validator that cannot fail would prove nothing), and passes good streams.
func TestWatchValidatorCatches(t *testing.T) {
	zero, two, three := u64(0), u64(2), u64(3)
	endAt := func(last string) error {
		return toStatus(&streamEndError{err: errShuttingDown, md: map[string]string{"lastSequence": last}})
	}
	for _, tc := range []struct {
		name     string
		sessions []watchSession
		want     string // a fragment of the first error; "" = valid
	}{
		{"valid", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1), vCommit(2, 3, 2, 3), vBeat(3), vCommit(4, 4, 4)}, end: endAt("4")}}}, ""},
		{"valid mid-commit resume", []watchSession{{{after: two, frames: []*historyv1.WatchBranchResponse{vStart(2, 3), vCommit(2, 3, 3)}}}}, ""},
		{"commit cut short", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1), vCommit(2, 3, 2)}}}}, "split"},
		{"valid resume", []watchSession{{
			{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 1), vCommit(1, 1, 1)}},
			{after: u64(1), frames: []*historyv1.WatchBranchResponse{vStart(1, 1), vCommit(2, 3, 2, 3)}},
		}}, ""},
		{"no start", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vCommit(1, 1, 1)}}}}, "not start"},
		{"second start", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 0), vStart(0, 0)}}}}, "second start"},
		{"wrong start cursor", []watchSession{{{after: two, frames: []*historyv1.WatchBranchResponse{vStart(0, 3)}}}}, "asked for 2"},
		{"gap", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1), vCommit(3, 3, 3)}}}}, "gap"},
		{"duplicate", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1), vCommit(1, 1, 1)}}}}, "repeated"},
		{"out of order in a commit", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 2, 2, 1)}}}}, "follows"},
		{"split commit", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 2, 1), vCommit(1, 2, 2)}}}}, "split"},
		{"event outside its commit", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1, 2)}}}}, "outside"},
		{"heartbeat behind", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 2, 1, 2), vBeat(1)}}}}, "behind"},
		{"event below a heartbeat", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vBeat(2), vCommit(2, 2, 2)}}}}, "at or below"},
		{"end claims more", []watchSession{{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 3), vCommit(1, 1, 1)}, end: endAt("2")}}}, "lastSequence 2"},
		{"resume from elsewhere", []watchSession{{
			{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 1), vCommit(1, 1, 1)}},
			{after: three, frames: []*historyv1.WatchBranchResponse{vStart(3, 3)}},
		}}, "resumes after"},
		{"sessions disagree", []watchSession{
			{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 1), vCommit(1, 1, 1)}}},
			{{after: zero, frames: []*historyv1.WatchBranchResponse{vStart(0, 1), {Frame: &historyv1.WatchBranchResponse_Commit{Commit: &historyv1.BranchCommit{
				FirstSequence: 1, LastSequence: 1, Events: []*historyv1.BranchEvent{{Sequence: 1, Kind: historyv1.EventKind_EVENT_KIND_SYSTEM_SET}}}}}}}},
		}, "another as"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validateSessions(tc.sessions...)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("a valid history was rejected: %v", errs)
			case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}
