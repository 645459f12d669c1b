package server

import (
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
	a, _ := fc.frame(c, false, true)
	b, size := fc.frame(c, false, true)
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
	if other, _ := fc.frame(commit(7, msg("other")), false, true); other == a {
		t.Error("another commit at the same sequence got the cached frame")
	}
	copied, _ := fc.frame(append(store.Commit(nil), c...), false, true)
	if again, _ := fc.frame(c, false, true); copied == again {
		t.Error("a slice of its own shared the frame of another slice")
	}
	big := commit(8, msg(strings.Repeat("x", maxSharedFrame)))
	f1, n1 := fc.frame(big, false, true)
	f2, _ := fc.frame(big, false, true)
	if f, ok := f1.(*historyv1.WatchBranchResponse); !ok || f2 == any(f) {
		t.Error("an oversized frame was kept")
	} else if n1 != proto.Size(f) {
		t.Errorf("oversized frame size %d, want %d", n1, proto.Size(f))
	}
	x, _ := fc.frame(c, false, false)
	y, _ := fc.frame(c, false, false)
	if x == y {
		t.Error("without encoding, two calls shared a frame")
	}
}
