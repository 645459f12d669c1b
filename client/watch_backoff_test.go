package client_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// startOnlyServer is a HistoryService whose every WatchBranch sends its start frame and then ends
// UNAVAILABLE: a server that keeps accepting streams while it shuts down.
type startOnlyServer struct {
	historyv1.UnimplementedHistoryServiceServer
}

func (startOnlyServer) WatchBranch(req *historyv1.WatchBranchRequest, s grpc.ServerStreamingServer[historyv1.WatchBranchResponse]) error {
	err := s.Send(&historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Start{Start: &historyv1.WatchStart{
		BranchId: req.GetBranchId(), Incarnation: "5b1c0000-0000-4000-8000-000000000000", AfterSequence: req.GetAfterSequence(),
	}}})
	if err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "shutting down")
}

// TestWatchBacksOffStreamsThatDeliverNothing: a stream that ends right after its start frame is a
// failed attempt: Watch pauses before the next and gives up after MaxAttempts, instead of
// reconnecting in a tight loop for ever (before, any start frame reset the count).
func TestWatchBacksOffStreamsThatDeliverNothing(t *testing.T) {
	c := serveFake(t, func(gs *grpc.Server) { historyv1.RegisterHistoryServiceServer(gs, startOnlyServer{}) })
	var attempts []int
	var last error
	req := &historyv1.WatchBranchRequest{BranchId: "0c0ffee0-0000-4000-8000-000000000002", AfterSequence: proto.Uint64(0)}
	for commit, err := range c.Watch(testContext(t), req, client.WithWatchRetry(fastRetry),
		client.OnResume(func(r client.Resume) { attempts = append(attempts, r.Attempt) })) {
		if commit != nil {
			t.Fatalf("yielded %v", commit)
		}
		last = err
	}
	if want := []int{1, 2, 3, 4}; !slices.Equal(attempts, want) {
		t.Errorf("resume attempts %v, want %v", attempts, want)
	}
	if status.Code(last) != codes.Unavailable {
		t.Errorf("Watch ended with %v, want the last UNAVAILABLE after MaxAttempts", last)
	}
}
