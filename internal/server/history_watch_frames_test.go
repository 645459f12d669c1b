package server

import (
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// TestFrameCacheShares: the watchers of one published commit share one marshalled frame, which
// the server's codec sends as it is and which decodes to the commit's frame; another commit (even
// at the same sequence, or the same events in a slice of their own) gets its own; an oversized
// frame is not kept; without encoding each call converts anew.
func TestFrameCacheShares(t *testing.T) {
	msg := func(text string) *envelope.Message {
		f := store.Factory{Instruction: jsonv.StringValue(text)}
		st := store.NewMemory()
		res, err := st.CreateBranch(t.Context(), store.CreateBranchInput{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := st.AddMessage(t.Context(), res.Branch.ID, store.AddInput{Factory: f}, store.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return w.Message.Message
	}
	commit := func(seq uint64, m *envelope.Message) store.Commit {
		return store.Commit{{Sequence: seq, CommitFirst: seq, CommitLast: seq, Kind: store.EventMessageAdded, Message: m, Index: 1}}
	}
	var fc frameCache
	c := commit(7, msg("hello"))
	a, _ := fc.frame(c, false, true, 0)
	b, size := fc.frame(c, false, true, 0)
	pa, ok := a.(*preEncoded)
	if !ok || a != b {
		t.Fatalf("frames %T %p and %p: want one shared *preEncoded", a, a, b)
	}
	data, err := newRequestCodec().Marshal(pa)
	if err != nil {
		t.Fatal(err)
	}
	var got historyv1.WatchBranchResponse
	if err := proto.Unmarshal(data.Materialize(), &got); err != nil || !proto.Equal(&got, commitFrame(c, messageOut{omitRendered: true})) {
		t.Errorf("the codec sent %v (%v), want %v", &got, err, commitFrame(c, messageOut{omitRendered: true}))
	}
	if size != len(data.Materialize()) {
		t.Errorf("frame size %d, want the %d bytes sent", size, len(data.Materialize()))
	}
	if other, _ := fc.frame(commit(7, msg("other")), false, true, 0); other == a {
		t.Error("another commit at the same sequence got the cached frame")
	}
	copied, _ := fc.frame(append(store.Commit(nil), c...), false, true, 0)
	if again, _ := fc.frame(c, false, true, 0); copied == again {
		t.Error("a slice of its own shared the frame of another slice")
	}
	big := commit(8, msg(strings.Repeat("x", maxSharedFrame)))
	f1, n1 := fc.frame(big, false, true, 0)
	f2, _ := fc.frame(big, false, true, 0)
	if f, ok := f1.(*historyv1.WatchBranchResponse); !ok || f2 == any(f) {
		t.Error("an oversized frame was kept")
	} else if n1 != proto.Size(f) {
		t.Errorf("oversized frame size %d, want %d", n1, proto.Size(f))
	}
	x, _ := fc.frame(c, false, false, 0)
	y, _ := fc.frame(c, false, false, 0)
	if x == y {
		t.Error("without encoding, two calls shared a frame")
	}
}

// TestFrameMeasuredAsBuilt: issue 11 review: a commit's frame is measured as it is built, and
// building stops at the first event past the limit, so refusing a commit far past the frame budget
// (here 32 events of 64 KiB rendered, 4 MiB and more, against 128 KiB) costs about the budget, not
// the whole frame rendered and marshalled.
func TestFrameMeasuredAsBuilt(t *testing.T) {
	st := store.NewMemory()
	res, err := st.CreateBranch(t.Context(), store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	var c store.Commit
	for i := range 32 {
		w, err := st.AddMessage(t.Context(), res.Branch.ID, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(strings.Repeat("z", 64<<10))}}, store.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 2)
		c = append(c, store.Event{Sequence: seq, CommitFirst: 2, CommitLast: 33, Kind: store.EventMessageAdded, Message: w.Message.Message, Index: i})
	}
	fc := frameCache{maxRendered: 1 << 20}
	const limit = 128 << 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	frame, size := fc.frame(c, true, true, limit)
	runtime.ReadMemStats(&after)
	if frame != nil || size <= limit {
		t.Fatalf("frame = %T, size %d, want none and a size past %d", frame, size, limit)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("refusing the frame allocated %d bytes, want at most %d", got, 2<<20)
	}
}

// A commit whose frame is exactly the limit fits: commitFrameWithin's early stop counts the frame's
// overhead at its least (a tag and a one-byte length), so it refuses only a frame that cannot fit,
// and the caller checks the whole frame's size. It counted 16 bytes for the 2 to 6 they take, and
// refused frames within about 14 bytes of the limit (a review's find).
func TestCommitFrameWithinTakesAFrameAtTheLimit(t *testing.T) {
	st := store.NewMemory()
	res, err := st.CreateBranch(t.Context(), store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.AddMessage(t.Context(), res.Branch.ID, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("at the limit")}}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Commit{{Sequence: 2, CommitFirst: 2, CommitLast: 2, Kind: store.EventMessageAdded, Message: w.Message.Message, Index: 0}}
	out := messageOut{omitRendered: true}
	exact := proto.Size(commitFrame(c, out))
	if frame, size := commitFrameWithin(c, out, exact); frame == nil || size != exact {
		t.Fatalf("a frame of %d bytes under a limit of %d: %v, size %d; want it, at %d", exact, exact, frame, size, exact)
	}
	if frame, size := commitFrameWithin(c, out, exact-1); frame != nil && size <= exact-1 {
		t.Fatalf("a frame of %d bytes under a limit of %d: size %d, want it over the limit", exact, exact-1, size)
	}
	// The frame cache, which both the one-commit and the batched watch frames take their frames
	// from, gives nil for a frame a byte over the limit, shared or not (a frame built whole can be
	// over it by a few bytes: commitFrameWithin's early stop counts the overhead at its least).
	for _, encode := range []bool{true, false} {
		var fc frameCache
		if frame, size := fc.frame(c, false, encode, exact-1); frame != nil || size <= exact-1 {
			t.Fatalf("encode %v: a frame of %d bytes under a limit of %d: %T, size %d; want nil, over the limit", encode, exact, exact-1, frame, size)
		}
		if frame, size := fc.frame(c, false, encode, exact); frame == nil || size != exact {
			t.Fatalf("encode %v: a frame of %d bytes under a limit of %d: %T, size %d; want it", encode, exact, exact, frame, size)
		}
	}
}
