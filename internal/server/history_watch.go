package server

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// WatchBranch streams a branch's commits (HistoryService.WatchBranch; docs/design.md#sequences; the guarantees are written on the RPC in history_service.proto and argued in
// docs/decisions/0005-watch-guarantees.md). One loop shape (docs/development.md#style-streams): validate,
// subscribe, defer unsubscribe, send the start frame and the replay (which the subscription copies
// from the branch's log a chunk at a time, so a deep cursor holds no backlog), then select over the
// context, shutdown, the subscription's commits and the heartbeat. Every end after the start frame
// carries the stream's cursor (lastSequence) in the ErrorInfo.
func (s *HistoryServer) WatchBranch(req *historyv1.WatchBranchRequest, stream grpc.ServerStreamingServer[historyv1.WatchBranchResponse]) (err error) {
	if s.streamEnded != nil {
		defer func() { s.streamEnded(err) }()
	}
	id, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return err
	}
	in, err := subscribeInput(req)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	sub, err := s.store.Subscribe(ctx, id, in)
	if errors.Is(err, store.ErrCursorAhead) {
		return &FieldError{Field: "after_sequence", Err: err}
	}
	if le, ok := errors.AsType[*store.SubscriptionLimitError](err); ok {
		return &watchLimitError{le}
	}
	if err != nil {
		return err
	}
	defer sub.Close()

	w := watch{sender: newStreamSender(stream, s.streams.sendTimeout), sub: sub, branch: id.String(), delivered: sub.After, s: s,
		render: req.GetIncludeRendered(), batch: req.GetBatchCommits()}
	defer w.sender.close()
	if err := w.send(startFrame(sub), sub.After); err != nil {
		return err
	}
	// The replay sends without waiting on anything but the client, so it looks at the context
	// before each chunk and each frame: a stream revoked (ADR-0009), cancelled or past its
	// deadline during a long replay sends no more of it.
	for replay := sub.Replay(); replay != nil; replay = sub.Replay() { // a chunk at a time, until live
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.batch {
			if err := w.sendCommits(replay, false); err != nil {
				return err
			}
			continue
		}
		for _, c := range replay {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := w.sendCommit(c, false); err != nil {
				return err
			}
		}
	}
	hb := newHeartbeat(s.streams.heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopping:
			return w.end(errShuttingDown)
		case c, ok := <-sub.Events():
			if !ok {
				return w.subscriptionEnd()
			}
			closed, err := w.sendLive(c)
			if err != nil {
				return err
			}
			if closed {
				return w.subscriptionEnd()
			}
			hb.Reset()
		case <-hb.C():
			// Only a stream with nothing pending is idle; one with commits pending sends them next.
			if head, ok := sub.CaughtUp(); ok {
				if err := w.send(s.watchHeartbeat(head), head); err != nil {
					return err
				}
			}
			hb.Reset()
		}
	}
}

// watch is one WatchBranch stream's state: what it has sent.
type watch struct {
	s       *HistoryServer
	sender  *streamSender
	sub     *store.Subscription
	branch  string
	render  bool           // the request's include_rendered
	batch   bool           // the request's batch_commits: commits waiting go out several to a frame
	linger  *time.Timer    // batchLinger's timer, made at the first batch
	pending []store.Commit // a live batch's commits, kept for the next batch's
	// delivered is the stream's cursor: every event up to it was sent (or filtered out). It only
	// moves once a frame's send has returned, so it is never ahead of what the client received.
	delivered uint64
}

// sendCommit sends c's frame, marshalled once for all the commit's watchers with shared (a live
// commit; a replayed one is a slice of its own and would only miss). A frame over the server's
// limit ends the stream instead (FRAME_TOO_LARGE), naming the commit so the client can step over it;
// the frame is measured as it is built and building stops at the first event past the limit, so
// frameBytes is the size reached then, a lower bound of the whole frame's.
func (w *watch) sendCommit(c store.Commit, shared bool) error {
	frame, size := w.s.frames[b2i(w.render)].frame(c, w.render, shared, w.s.maxFrame)
	if size > w.s.maxFrame {
		md := w.metadata()
		md["commitLastSequence"] = strconv.FormatUint(commitLast(c), 10)
		md["frameBytes"] = strconv.Itoa(size)
		md["maxFrameBytes"] = strconv.Itoa(w.s.maxFrame)
		md["flag"] = flagMaxResponseBytes
		return &streamEndError{md: md, err: fmt.Errorf("%w: the commit of sequences %d to %d takes at least %d bytes, more than %d; "+
			"resume after sequence %d (without include_rendered, if set) and read what it wrote with ListMessages",
			errFrameTooLarge, c[0].CommitFirst, commitLast(c), size, w.s.maxFrame, commitLast(c))}
	}
	return w.send(frame, commitLast(c))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// send sends one frame, bounded by the send timeout and cut short by shutdown, and on success moves
// the cursor to through.
func (w *watch) send(frame any, through uint64) error {
	err := w.sender.send(frame, nil, w.s.stopping)
	switch {
	case err == nil:
		w.delivered = through
		return nil
	case errors.Is(err, errSendTimeout):
		return tooSlow(err, w.metadata())
	case errors.Is(err, errSendAborted):
		return w.end(errShuttingDown)
	}
	return err
}

// subscriptionEnd is the error that ends the stream once the subscription's commits are drained:
// too slow (evicted), or the branch deleted (its BRANCH_DELETED commit was the last frame).
func (w *watch) subscriptionEnd() error {
	err := w.sub.Err()
	if errors.Is(err, store.ErrSubscriberTooSlow) {
		return tooSlow(err, w.metadata())
	}
	return w.end(err)
}

// end wraps err with the stream's ErrorInfo metadata.
func (w *watch) end(err error) error { return &streamEndError{err: err, md: w.metadata()} }

// metadata is the ErrorInfo metadata of every end after the start frame: the branch and the
// stream's cursor.
func (w *watch) metadata() map[string]string {
	return map[string]string{"branchId": w.branch, "lastSequence": strconv.FormatUint(w.delivered, 10)}
}

// subscribeInput validates the request's cursor, incarnation and kinds.
func subscribeInput(req *historyv1.WatchBranchRequest) (store.SubscribeInput, error) {
	in := store.SubscribeInput{After: req.AfterSequence}
	if req.Incarnation != nil {
		inc, err := parseID("incarnation", req.GetIncarnation())
		if err != nil {
			return in, err
		}
		in.Incarnation = &inc
	}
	for i, k := range req.GetKinds() {
		kind, ok := eventKindFromProto[k]
		if !ok {
			return in, &FieldError{Field: fmt.Sprintf("kinds[%d]", i), Err: fmt.Errorf("%w: not an event kind: %v", envelope.ErrInvalid, k)}
		}
		in.Kinds = append(in.Kinds, kind)
	}
	return in, nil
}

// errFrameTooLarge ends a watch stream whose next commit does not fit in a frame (RESOURCE_EXHAUSTED,
// FRAME_TOO_LARGE; errors.go).
var errFrameTooLarge = errors.New("commit too large for one frame")

// commitLast is the last sequence of c's commit: the cursor once c is sent.
func commitLast(c store.Commit) uint64 { return c[len(c)-1].CommitLast }

func startFrame(sub *store.Subscription) *historyv1.WatchBranchResponse {
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Start{Start: &historyv1.WatchStart{
		BranchId:       sub.BranchID.String(),
		Incarnation:    sub.Incarnation.String(),
		AfterSequence:  sub.After,
		HeadSequence:   sub.Head,
		OldestSequence: sub.Oldest,
	}}}
}

func (s *HistoryServer) watchHeartbeat(head uint64) *historyv1.WatchBranchResponse {
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Heartbeat{Heartbeat: &historyv1.WatchHeartbeat{
		HeadSequence: head, Time: timestamppb.New(s.now()),
	}}}
}

// flagWatchMaxStreams sets the store's limit of open WatchBranch streams.
const flagWatchMaxStreams = "--watch-max-streams"

// watchLimitError is the store's SubscriptionLimitError with the flag that sets the limit, in the
// text and the metadata (RESOURCE_EXHAUSTED, TOO_MANY_STREAMS).
type watchLimitError struct{ *store.SubscriptionLimitError }

func (e *watchLimitError) Error() string {
	return fmt.Sprintf("%v; the limit is set by %s, retry when a stream has ended", e.SubscriptionLimitError, flagWatchMaxStreams)
}

// Unwrap returns the store's error, which wraps store.ErrTooManySubscriptions.
func (e *watchLimitError) Unwrap() error { return e.SubscriptionLimitError }

// ErrorMetadata adds the flag to the store's figures.
func (e *watchLimitError) ErrorMetadata() map[string]string {
	md := e.SubscriptionLimitError.ErrorMetadata()
	md["flag"] = flagWatchMaxStreams
	return md
}
