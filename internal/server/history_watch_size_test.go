package server

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestWatchFramesUnrenderedByDefault: frames carry a message's `rendered` only when the request sets
// include_rendered, as writes do (docs/decisions/0007): rendering doubles a frame.
func TestWatchFramesUnrenderedByDefault(t *testing.T) {
	f := newWatchFixture(t, nil)
	b := f.create(t, &historyv1.CreateBranchRequest{})
	plain, plainRec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	rendered, renderedRec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, IncludeRendered: true})
	f.instruction(t, b, "hello")
	recvUntil(plain, plainRec, through(2))
	recvUntil(rendered, renderedRec, through(2))
	p := plainRec.frames[len(plainRec.frames)-1].GetCommit().GetEvents()[0].GetMessage()
	r := renderedRec.frames[len(renderedRec.frames)-1].GetCommit().GetEvents()[0].GetMessage()
	if p.GetId() == "" || p.Rendered != nil {
		t.Errorf("without include_rendered: %v, want the message without rendered", p)
	}
	if r.GetId() != p.GetId() || r.GetRendered().GetText() != "Instruction: hello" {
		t.Errorf("with include_rendered: %v, want it rendered", r)
	}
}

// TestWatchFrameTooLarge: a commit whose frame would pass the limit (4 MiB, the receive limit gRPC
// clients default to) ends the stream with RESOURCE_EXHAUSTED, FRAME_TOO_LARGE, naming the commit,
// instead of sending a frame the client cannot read: before this, one large message ended every
// watcher's stream, and every resume, on the client's own receive limit. Resuming after the commit
// goes on; the events before it were all delivered (ADR-0006 D4; issue 5: "resumes with no loss").
func TestWatchFrameTooLarge(t *testing.T) {
	f := newWatchFixture(t, nil)
	f.hs.maxFrame = 64 << 10 // the bound, scaled down
	b := f.create(t, &historyv1.CreateBranchRequest{})
	f.instruction(t, b, "small")                     // 2
	f.instruction(t, b, strings.Repeat("x", 40<<10)) // 3: fits, but not rendered as well
	f.instruction(t, b, strings.Repeat("y", 80<<10)) // 4: does not fit
	f.instruction(t, b, "after")                     // 5

	for _, render := range []bool{false, true} {
		s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(1), IncludeRendered: render})
		recvUntil(s, rec, nil)
		last := uint64(3)
		if render {
			last = 2
		}
		checkStatus(t, rec.end, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_FRAME_TOO_LARGE, map[string]string{
			"branchId": b, "lastSequence": strconv.FormatUint(last, 10), "commitLastSequence": strconv.FormatUint(last+1, 10),
			"frameBytes": metadataValue(rec.end, "frameBytes"), "maxFrameBytes": "65536", "flag": "--max-response-bytes",
		})
		if n, err := strconv.Atoi(metadataValue(rec.end, "frameBytes")); err != nil || n <= 64<<10 {
			t.Errorf("frameBytes = %d (%v), want over the limit", n, err)
		}
		if got := len(rec.frames); uint64(got) != last { // the start frame, then one a commit
			t.Errorf("include_rendered %v: %d frames before the end, want %d", render, got, last)
		}
		mustValid(t, watchSession{rec})
	}
	// Stepping over the commit, as the reason says.
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(4)})
	recvUntil(s, rec, through(5))
	if rec.end != nil || rec.frames[len(rec.frames)-1].GetCommit().GetEvents()[0].GetMessage().GetInstruction().GetInstruction() != "after" {
		t.Errorf("resume after the large commit: %v, %v", rec.frames, rec.end)
	}
}

// TestWatchLargeLiveCommit: a live commit over the limit ends the stream the same way (the shared,
// marshalled-once frame path), and a commit that fits still arrives whole.
func TestWatchLargeLiveCommit(t *testing.T) {
	f := newWatchFixture(t, nil)
	f.hs.maxFrame = 64 << 10
	b := f.create(t, &historyv1.CreateBranchRequest{})
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	f.instruction(t, b, strings.Repeat("x", 40<<10)) // 2
	f.instruction(t, b, strings.Repeat("y", 80<<10)) // 3
	recvUntil(s, rec, nil)
	checkStatus(t, rec.end, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_FRAME_TOO_LARGE, map[string]string{
		"branchId": b, "lastSequence": "2", "commitLastSequence": "3",
		"frameBytes": metadataValue(rec.end, "frameBytes"), "maxFrameBytes": "65536", "flag": "--max-response-bytes",
	})
}

func metadataValue(err error, key string) string { return errorInfoOf(err).GetMetadata()[key] }
