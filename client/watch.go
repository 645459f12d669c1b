package client

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	retry    RetryPolicy
	onResume func(Resume)
	after    *uint64 // After, FromStart (watch_options.go): the first stream's cursor
}

// DefaultWatchRetry bounds the reconnections of Watch: 10 attempts in a row that deliver no
// commit or heartbeat (about 12 s of pauses from 100 ms doubling to at most 2 s, ±20% jitter)
// before Watch gives up. A stream that had delivered a commit or a heartbeat resumes at once; reconnections that
// fail, or whose stream ends right after its start frame (a server shutting down), pause.
var DefaultWatchRetry = RetryPolicy{
	MaxAttempts:    10,
	InitialBackoff: 100 * time.Millisecond,
	MaxBackoff:     2 * time.Second,
	Multiplier:     2,
	Jitter:         0.2,
}

// WithWatchRetry replaces DefaultWatchRetry. PerAttemptTimeout is not used.
func WithWatchRetry(p RetryPolicy) WatchOption { return func(o *watchOptions) { o.retry = p } }

// OnResume calls f before each resumption, with the cursor and the error that ended the previous
// stream (for logs and metrics). f runs on the caller's goroutine and must not block for long.
func OnResume(f func(Resume)) WatchOption { return func(o *watchOptions) { o.onResume = f } }

// Resume describes one resumption of a watch.
type Resume struct {
	// After is the cursor the new stream starts after: the last sequence received.
	After uint64
	// Cause is the error that ended the previous stream (or the failed attempt before).
	Cause error
	// Attempt counts the attempts since a stream last delivered a commit or heartbeat, from 1.
	Attempt int
}

// Watch streams a branch's commits (HistoryService.WatchBranch) and keeps the stream going: when
// it ends because the connection broke or the server is restarting (UNAVAILABLE), or because the
// watcher fell behind and was evicted (RESOURCE_EXHAUSTED, ERROR_REASON_SUBSCRIBER_TOO_SLOW), Watch
// opens a new stream after the last sequence received (the last commit's last_sequence, or a
// heartbeat's head_sequence) with the branch's incarnation, so every event is yielded exactly once
// and in order (docs/design.md#sequences).
//
// req is the first stream's request (branch, cursor, kinds); it is not modified. The sequence ends
// without an error after the commit of a BRANCH_DELETED event, or when the caller stops ranging.
// It ends with an error, yielded with a nil commit: a *CompactedError (errors.Is
// ErrHistoryCompacted) when the cursor is no longer retained or the branch was re-created; the
// context's error once it is done; the last error after the retry policy's MaxAttempts failed
// reconnections in a row; or any other error the server sends (NOT_FOUND for an unknown branch,
// INVALID_ARGUMENT, RESOURCE_EXHAUSTED with ERROR_REASON_FRAME_TOO_LARGE for a commit too large for
// one frame, ...). NOT_FOUND after commits were yielded means the branch was deleted while Watch
// was reconnecting, so its BRANCH_DELETED commit was never received.
func (c *Client) Watch(ctx context.Context, req *historyv1.WatchBranchRequest, opts ...WatchOption) iter.Seq2[*historyv1.BranchCommit, error] {
	o := watchOptions{retry: DefaultWatchRetry}
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(*historyv1.BranchCommit, error) bool) {
		w := &watcher{c: c, req: proto.CloneOf(req), yield: yield}
		if o.after != nil {
			w.req.AfterSequence = proto.Uint64(*o.after)
		}
		attempt := 0
		for {
			err := w.stream(ctx)
			if w.stopped || w.deleted {
				// After the commit of BRANCH_DELETED nothing more can come: the sequence ends
				// there, whatever ended the stream (a reconnection would find the branch gone).
				return
			}
			if ctx.Err() != nil {
				yield(nil, ctx.Err())
				return
			}
			if !resumable(err) {
				if err = w.final(err); err != nil {
					yield(nil, err)
				}
				return
			}
			if w.progressed {
				attempt = 0
			}
			attempt++
			if attempt > max(o.retry.MaxAttempts, 1) {
				yield(nil, err)
				return
			}
			// A stream that had delivered something resumes at once.
			if attempt > 1 && !sleep(ctx, o.retry.backoff(attempt-1)) {
				yield(nil, ctx.Err())
				return
			}
			if o.onResume != nil {
				o.onResume(Resume{After: w.req.GetAfterSequence(), Cause: err, Attempt: attempt})
			}
		}
	}
}

// watcher is the state of one Watch: the request of the next stream, whose cursor and incarnation
// follow what was received.
type watcher struct {
	c          *Client
	req        *historyv1.WatchBranchRequest
	yield      func(*historyv1.BranchCommit, error) bool
	progressed bool // the last stream sent a commit or a heartbeat after its start frame
	stopped    bool // the caller stopped ranging
	deleted    bool // a BRANCH_DELETED event was yielded
}

// stream runs one WatchBranch stream until it ends and returns the error that ended it.
func (w *watcher) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when the caller stops ranging
	w.progressed = false
	s, err := w.c.History.WatchBranch(ctx, w.req)
	if err != nil {
		return err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		switch f := resp.GetFrame().(type) {
		case *historyv1.WatchBranchResponse_Start:
			w.req.Incarnation = proto.String(f.Start.GetIncarnation())
			w.advance(f.Start.GetAfterSequence())
		case *historyv1.WatchBranchResponse_Heartbeat:
			w.progressed = true
			w.advance(f.Heartbeat.GetHeadSequence())
		case *historyv1.WatchBranchResponse_Commit:
			if !w.commit(f.Commit) {
				return nil
			}
		case *historyv1.WatchBranchResponse_Commits: // batch_commits (issue 21): each in order
			for _, c := range f.Commits.GetCommits() {
				if !w.commit(c) {
					return nil
				}
			}
		}
	}
}

// commit yields one commit and moves the cursor past it; false when the caller stopped ranging.
func (w *watcher) commit(c *historyv1.BranchCommit) bool {
	w.progressed = true
	w.advance(c.GetLastSequence())
	for _, ev := range c.GetEvents() {
		if ev.GetKind() == historyv1.EventKind_EVENT_KIND_BRANCH_DELETED {
			w.deleted = true
		}
	}
	if !w.yield(c, nil) {
		w.stopped = true
		return false
	}
	return true
}

// advance moves the cursor to seq (never back).
func (w *watcher) advance(seq uint64) {
	if w.req.AfterSequence == nil || seq > w.req.GetAfterSequence() {
		w.req.AfterSequence = proto.Uint64(seq)
	}
}

// final turns the error that ended the watch into what Watch yields: nil for the end after a
// deleted branch, a *CompactedError for HISTORY_COMPACTED, else err itself.
func (w *watcher) final(err error) error {
	switch Reason(err) {
	case historyv1.ErrorReason_ERROR_REASON_BRANCH_DELETED:
		if w.deleted {
			return nil
		}
	case historyv1.ErrorReason_ERROR_REASON_HISTORY_COMPACTED:
		ce := &CompactedError{BranchID: w.req.GetBranchId(), After: w.req.GetAfterSequence(), Err: err}
		if v, ok := ErrorInfo(err).GetMetadata()["oldestSequence"]; ok {
			ce.OldestSequence, _ = strconv.ParseUint(v, 10, 64)
		}
		return ce
	}
	return err
}

// resumable reports whether a stream that ended with err may be resumed: the connection broke or
// the server is going away (UNAVAILABLE), or the watcher was evicted for being slow.
func resumable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		return Reason(err) == historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW
	}
	return false
}
