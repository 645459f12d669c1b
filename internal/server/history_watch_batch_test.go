package server

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// unbatched is rec with every `commits` frame replaced by its commits as `commit` frames, for the
// validator, which knows the one-commit frames; batches counts the frames that held more than one.
func unbatched(rec *watchStream) (out *watchStream, batches, commits int) {
	cp := *rec
	cp.frames = nil
	for _, f := range rec.frames {
		if b := f.GetCommits(); b != nil {
			if len(b.GetCommits()) > 1 {
				batches++
			}
			for _, c := range b.GetCommits() {
				cp.frames = append(cp.frames, &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: c}})
				commits++
			}
			continue
		}
		if f.GetCommit() != nil {
			commits++
		}
		cp.frames = append(cp.frames, f)
	}
	return &cp, batches, commits
}

// throughBatch is through that also reads the cursor of a `commits` frame.
func throughBatch(seq uint64) func(*historyv1.WatchBranchResponse) bool {
	return func(f *historyv1.WatchBranchResponse) bool {
		if cs := f.GetCommits().GetCommits(); len(cs) > 0 {
			return cs[len(cs)-1].GetLastSequence() >= seq
		}
		return through(seq)(f)
	}
}

// TestWatchBatchFrameTags: the batch frames are spliced from the shared commit frames by field
// number (history_watch_batch.go); the numbers must be the proto's.
func TestWatchBatchFrameTags(t *testing.T) {
	resp := (&historyv1.WatchBranchResponse{}).ProtoReflect().Descriptor().Fields()
	batch := (&historyv1.BranchCommits{}).ProtoReflect().Descriptor().Fields()
	for _, tc := range []struct {
		tag  []byte
		want protowire.Number
	}{
		{commitFrameTag, resp.ByName("commit").Number()},
		{batchFrameTag, resp.ByName("commits").Number()},
		{batchEntryTag, batch.ByName("commits").Number()},
	} {
		if n, typ, _ := protowire.ConsumeTag(tc.tag); n != tc.want || typ != protowire.BytesType {
			t.Errorf("tag %x is field %d, want %d", tc.tag, n, tc.want)
		}
	}
}

// TestWatchBatchReplay: issue 21 "Watch frames carry a batch of commits when the subscriber is
// behind (`commits` repeated, in order, bounded by the response budget)": a replay of 60 commits
// with batch_commits comes in batches, none over the budget, and the stream keeps every guarantee
// of the one-commit frames (ordered, gap-free, whole commits: the validator).
func TestWatchBatchReplay(t *testing.T) {
	f := newWatchFixture(t, nil)
	f.hs.maxFrame = 4 << 10
	b := f.create(t, nil)
	for i := range 59 {
		f.instruction(t, b, fmt.Sprint("message ", i))
	}
	head := f.head(t, b)
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: new(uint64(0)), BatchCommits: true})
	if recvUntil(s, rec, throughBatch(head)) {
		t.Fatalf("the stream ended: %v", rec.end)
	}
	flat, batches, commits := unbatched(rec)
	if commits != int(head) || batches == 0 {
		t.Fatalf("%d commits in %d batches, want %d commits, some batched", commits, batches, head)
	}
	if len(rec.frames) >= commits {
		t.Errorf("%d frames for %d commits: batching saved nothing", len(rec.frames), commits)
	}
	for i, fr := range rec.frames {
		if n := proto.Size(fr); n > f.hs.maxFrame {
			t.Errorf("frame %d is %d bytes, over the budget %d", i, n, f.hs.maxFrame)
		}
	}
	mustValid(t, watchSession{flat})
}

// TestWatchBatchLive: live commits written faster than a watcher sends them are batched for a
// watcher that asked (each commit still encoded once: the batch is spliced from the shared frames)
// and never for one that did not; both streams keep the guarantees.
func TestWatchBatchLive(t *testing.T) {
	// 250 commits in a burst, at the default bounds: ordinary traffic is bound by the count, not the
	// bytes (the review of the byte bound: a default of 128 KiB evicted these watchers).
	f := newWatchFixture(t, nil)
	b := f.create(t, nil)
	ctx := testContext(t)
	sb, batched := openWatch(ctx, t, f.watchClient(t), &historyv1.WatchBranchRequest{BranchId: b, BatchCommits: true})
	sp, plain := openWatch(ctx, t, f.watchClient(t), &historyv1.WatchBranchRequest{BranchId: b})
	id := mustUUID(t, b)
	for i := range 250 { // under the subscriber buffer (256): neither stream is evicted
		if _, err := f.st.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(fmt.Sprint(i))}}, store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	head := f.head(t, b)
	if recvUntil(sb, batched, throughBatch(head)) || recvUntil(sp, plain, through(head)) {
		t.Fatalf("a stream ended: %v, %v", batched.end, plain.end)
	}
	flat, batches, commits := unbatched(batched)
	if _, pb, _ := unbatched(plain); pb != 0 || len(plain.frames) != 251 {
		t.Errorf("the watcher without batch_commits got %d batches in %d frames, want none in 251", pb, len(plain.frames))
	}
	t.Logf("batch_commits: %d commits in %d frames (%d batches)", commits, len(batched.frames)-1, batches)
	if commits != 250 {
		t.Errorf("%d commits, want 250", commits)
	}
	mustValid(t, watchSession{flat}, watchSession{plain})
}
