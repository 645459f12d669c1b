package client

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// scriptedWatch is a HistoryService whose WatchBranch streams play scripts: each call the next,
// each script its frames and then its end.
type scriptedWatch struct {
	historyv1.HistoryServiceClient
	scripts []watchScript
	calls   int
}

type watchScript struct {
	frames []*historyv1.WatchBranchResponse
	end    error
}

func (s *scriptedWatch) WatchBranch(ctx context.Context, _ *historyv1.WatchBranchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[historyv1.WatchBranchResponse], error) {
	sc := s.scripts[min(s.calls, len(s.scripts)-1)]
	s.calls++
	return &scriptedStream{ctx: ctx, script: sc}, nil
}

type scriptedStream struct {
	grpc.ClientStream
	ctx    context.Context
	script watchScript
	next   int
}

func (s *scriptedStream) Recv() (*historyv1.WatchBranchResponse, error) {
	if s.next < len(s.script.frames) {
		s.next++
		return s.script.frames[s.next-1], nil
	}
	return nil, s.script.end
}

func reasonError(c codes.Code, reason historyv1.ErrorReason, msg string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: "historyd"})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// Once Watch has yielded the commit of a BRANCH_DELETED event, the sequence ends without an error,
// even when the connection breaks before the stream's own end arrives: reconnecting could only
// find the branch gone (NOT_FOUND), which the docs reserve for a deletion never received (a
// review's find).
func TestWatchEndsAtTheDeletionItYielded(t *testing.T) {
	deleted := &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: &historyv1.BranchCommit{
		FirstSequence: 5, LastSequence: 5,
		Events: []*historyv1.BranchEvent{{Sequence: 5, Kind: historyv1.EventKind_EVENT_KIND_BRANCH_DELETED}},
	}}}
	start := &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Start{Start: &historyv1.WatchStart{Incarnation: "inc", AfterSequence: 4}}}
	fake := &scriptedWatch{scripts: []watchScript{
		{frames: []*historyv1.WatchBranchResponse{start, deleted}, end: status.Error(codes.Unavailable, "connection reset (test)")},
		{end: reasonError(codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND, "branch not found (test)")},
	}}
	c := &Client{History: fake}
	var commits int
	for commit, err := range c.Watch(t.Context(), &historyv1.WatchBranchRequest{BranchId: "b"}) {
		if err != nil {
			t.Fatalf("after %d commits (the BRANCH_DELETED one yielded): %v; want the sequence to end without an error", commits, err)
		}
		if commit.GetLastSequence() != 5 {
			t.Fatalf("commit %v, want the deletion at 5", commit)
		}
		commits++
	}
	if commits != 1 {
		t.Fatalf("%d commits, want 1", commits)
	}
}
