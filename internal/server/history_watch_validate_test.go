package server

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The watch validator, modelled on etcd's robustness watch validation (tests/robustness/validate/
// watch.go: Ordered, Unique, Atomic, Bookmarkable, Reliable, Resumable, and one history agreed by
// every watcher), with the guarantees WatchBranch writes down (history_service.proto;
// docs/design.md#sequences). Every watch test records what its clients received and runs it
// through validateSessions; TestWatchValidatorCatches checks that each rule can fail.

// watchStream is what a client received on one WatchBranch stream.
type watchStream struct {
	after    *uint64 // the request's after_sequence
	filtered bool    // the request had a kinds filter: events may be passed over
	frames   []*historyv1.WatchBranchResponse
	end      error // the error Recv ended with
}

// watchSession is one client's streams, in order: each one after the first resumes from the
// cursor the previous one reached.
type watchSession []*watchStream

// cursor returns the stream's cursor after its frames: the start's after_sequence, then each
// commit's last_sequence and each heartbeat's head_sequence.
func (s *watchStream) cursor() uint64 {
	var c uint64
	for _, f := range s.frames {
		switch {
		case f.GetStart() != nil:
			c = f.GetStart().GetAfterSequence()
		case f.GetCommit() != nil:
			c = f.GetCommit().GetLastSequence()
		case f.GetHeartbeat() != nil:
			c = f.GetHeartbeat().GetHeadSequence()
		}
	}
	return c
}

// events returns the stream's events in the order received.
func (s *watchStream) events() []*historyv1.BranchEvent {
	var out []*historyv1.BranchEvent
	for _, f := range s.frames {
		out = append(out, f.GetCommit().GetEvents()...)
	}
	return out
}

// validateStream checks one stream on its own and returns what it breaks.
//
//   - Start: the first frame, and only the first, is start; its after_sequence is the request's
//     (or its head when the request had none), at most its head.
//   - Ordered, Unique, Reliable (no gaps): event sequences rise by exactly one from the start's
//     after_sequence + 1 (with a kinds filter: strictly rise, past the cursor).
//   - Atomic: a commit frame's events are consecutive and inside [first_sequence, last_sequence];
//     it ends at last_sequence; it starts at first_sequence unless it is the stream's first commit
//     and the cursor fell inside it (then it starts right after the cursor).
//   - Bookmarkable: a heartbeat's head_sequence is not behind the cursor, and no event after it is
//     at or below it.
//   - Resumable end: the end's ErrorInfo lastSequence, when present, is never ahead of the cursor
//     the client reached (a frame whose send timed out may still arrive after it).
func validateStream(s *watchStream) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(s.frames) == 0 {
		if s.end == nil {
			bad("a stream with no frames and no end")
		}
		return errs
	}
	start := s.frames[0].GetStart()
	if start == nil {
		return append(errs, fmt.Errorf("first frame %v is not start", s.frames[0]))
	}
	if s.after != nil && start.GetAfterSequence() != *s.after {
		bad("start.after_sequence %d, the request asked for %d", start.GetAfterSequence(), *s.after)
	}
	if s.after == nil && start.GetAfterSequence() != start.GetHeadSequence() {
		bad("a stream from now starts after %d, not at its head %d", start.GetAfterSequence(), start.GetHeadSequence())
	}
	if start.GetAfterSequence() > start.GetHeadSequence() {
		bad("start after %d is ahead of head %d", start.GetAfterSequence(), start.GetHeadSequence())
	}
	cursor := start.GetAfterSequence() // the last sequence received or passed over
	lastEvent := start.GetAfterSequence()
	firstCommit := true
	for i, f := range s.frames[1:] {
		switch {
		case f.GetStart() != nil:
			bad("frame %d is a second start", i+1)
		case f.GetHeartbeat() != nil:
			h := f.GetHeartbeat().GetHeadSequence()
			if h < cursor {
				bad("heartbeat head %d is behind the cursor %d", h, cursor)
			}
			cursor = h
		case f.GetCommit() != nil:
			c := f.GetCommit()
			evs := c.GetEvents()
			if len(evs) == 0 {
				bad("commit %d-%d has no events", c.GetFirstSequence(), c.GetLastSequence())
				continue
			}
			first, last := evs[0].GetSequence(), evs[len(evs)-1].GetSequence()
			if first < c.GetFirstSequence() || last > c.GetLastSequence() {
				bad("commit %d-%d carries events %d-%d outside it", c.GetFirstSequence(), c.GetLastSequence(), first, last)
			}
			for j := 1; j < len(evs); j++ {
				if evs[j].GetSequence() <= evs[j-1].GetSequence() || (!s.filtered && evs[j].GetSequence() != evs[j-1].GetSequence()+1) {
					bad("commit %d-%d: event %d follows %d", c.GetFirstSequence(), c.GetLastSequence(), evs[j].GetSequence(), evs[j-1].GetSequence())
				}
			}
			if !s.filtered {
				if last != c.GetLastSequence() {
					bad("commit %d-%d split: it ends at %d", c.GetFirstSequence(), c.GetLastSequence(), last)
				}
				midCommit := firstCommit && start.GetAfterSequence() >= c.GetFirstSequence() && first == start.GetAfterSequence()+1
				if first != c.GetFirstSequence() && !midCommit {
					bad("commit %d-%d split: it starts at %d", c.GetFirstSequence(), c.GetLastSequence(), first)
				}
			}
			for _, ev := range evs {
				seq := ev.GetSequence()
				switch {
				case seq <= lastEvent:
					bad("event %d after event %d: out of order or repeated", seq, lastEvent)
				case seq <= cursor:
					bad("event %d at or below the cursor %d a commit or heartbeat already passed", seq, cursor)
				case !s.filtered && seq != cursor+1:
					bad("gap: event %d after cursor %d", seq, cursor)
				}
				lastEvent = seq
				cursor = max(cursor, seq)
			}
			cursor = max(cursor, c.GetLastSequence())
			firstCommit = false
		default:
			bad("frame %d is empty", i+1)
		}
	}
	if md := errorInfoOf(s.end).GetMetadata(); md["lastSequence"] != "" {
		if last, err := strconv.ParseUint(md["lastSequence"], 10, 64); err != nil || last > cursor {
			bad("stream ended with lastSequence %s, ahead of the client's cursor %d", md["lastSequence"], cursor)
		}
	}
	return errs
}

// validateSession checks each stream of a session and that each resume continues exactly where
// the stream before it stopped (Resumable): it asks for the cursor the previous stream reached.
func validateSession(sess watchSession) []error {
	var errs []error
	for i, s := range sess {
		for _, err := range validateStream(s) {
			errs = append(errs, fmt.Errorf("stream %d: %w", i, err))
		}
		if i > 0 && len(s.frames) > 0 {
			prev := sess[i-1].cursor()
			if s.after == nil || *s.after != prev {
				errs = append(errs, fmt.Errorf("stream %d resumes after %v, the previous one reached %d", i, s.after, prev))
			}
		}
	}
	return errs
}

// mergeEvents checks that every session saw the same event at each sequence (etcd's
// mergeWatchEventHistory) and returns that history.
func mergeEvents(sessions []watchSession) (map[uint64]*historyv1.BranchEvent, []error) {
	var errs []error
	history := map[uint64]*historyv1.BranchEvent{}
	for i, sess := range sessions {
		for _, s := range sess {
			for _, ev := range s.events() {
				seen, ok := history[ev.GetSequence()]
				if !ok {
					history[ev.GetSequence()] = ev
					continue
				}
				if !proto.Equal(seen, ev) {
					errs = append(errs, fmt.Errorf("session %d saw event %d as %v, another as %v", i, ev.GetSequence(), ev, seen))
				}
			}
		}
	}
	return history, errs
}

// validateSessions runs every check over every session and returns what breaks, at most 20 lines.
func validateSessions(sessions ...watchSession) []error {
	var errs []error
	for i, sess := range sessions {
		for _, err := range validateSession(sess) {
			errs = append(errs, fmt.Errorf("session %d: %w", i, err))
		}
	}
	_, merr := mergeEvents(sessions)
	errs = append(errs, merr...)
	if len(errs) > 20 {
		errs = append(errs[:20], fmt.Errorf("... and %d more", len(errs)-20))
	}
	return errs
}
