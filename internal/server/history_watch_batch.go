package server

import (
	"time"

	"google.golang.org/grpc/mem"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// Batched watch frames (issue 21, WatchBranchRequest.batch_commits). A watcher that is behind has
// commits waiting in its subscription's buffer; sending them one frame each costs the server a send
// (an HTTP/2 frame, a flow-control round, a write) per commit per watcher, which with 100 watchers
// on a branch cut the writer to 0.11 of its speed. With batch_commits, the commits waiting are sent
// as one `commits` frame, up to the response budget, so a lagging watcher costs one send per batch.
//
// Each commit is still converted and marshalled once for all its watchers (frameCache): its shared
// frame is the bytes of WatchBranchResponse{commit: c}, field 2, and a BranchCommits entry is the
// same BranchCommit bytes under field 1, so a batch is spliced from the shared frames by rewriting
// one tag byte each, with no conversion or marshalling per watcher.

var (
	// commitFrameTag is the tag of WatchBranchResponse.commit (field 2, length-delimited).
	commitFrameTag = protowire.AppendTag(nil, 2, protowire.BytesType)
	// batchEntryTag is the tag of BranchCommits.commits (field 1, length-delimited).
	batchEntryTag = protowire.AppendTag(nil, 1, protowire.BytesType)
	// batchFrameTag is the tag of WatchBranchResponse.commits (field 4, length-delimited).
	batchFrameTag = protowire.AppendTag(nil, 4, protowire.BytesType)
)

// maxBatchTag is the most bytes a batch frame spends beyond its entries: its tag and its length.
const maxBatchTag = 1 + 5 // a frame is under 2 GiB: its length is a varint of at most 5 bytes

// batchLinger is how long a watcher that asked for batches waits after a live commit for more
// before it sends: a watcher that keeps up would otherwise send every commit alone, and the fan-out
// of one send per commit per watcher is what cut the writer to 0.11 of its speed under 100
// watchers. 2 ms gathers about ten commits at a few thousand commits a second, and is well below
// what a person or an agent notices; a watcher that did not ask is sent each commit at once.
//
// The watcher waits on a timer, not on its subscription's channel, and then takes every commit
// waiting there: a commit published while it lingers goes into the channel's buffer without
// waking it, so a batch costs the watcher one wake-up for its first commit and one for the timer,
// not one per commit (with 100 watchers, the writer's Publish woke 100 goroutines per commit).
// The linger is cut short once a quarter of the subscription's buffer is waiting (checked at its
// start and half-way): a burst is sent instead of being held until it fills the buffer. Only a
// whole buffer's worth within half the linger (256 commits in 1 ms at the default buffer, several
// times what an engine commits to one branch) could still evict the watcher as too slow, as it
// could evict one busy sending a frame; or, since the buffer is bounded in bytes too
// (--watch-buffer-bytes, 2 MiB), large commits past that within the linger (more than about 40 of
// 50 KB in 2 ms), which the check does not look at: the watcher then resumes from its cursor.
const batchLinger = 2 * time.Millisecond

// sendLive sends the live commit c and, with batch_commits, the commits that follow within
// batchLinger (those waiting in the subscription's buffer first), as few frames as the response
// budget allows. closed reports that the subscription's channel closed while it looked for more
// (the caller ends the stream after).
func (w *watch) sendLive(c store.Commit) (closed bool, err error) {
	if !w.batch {
		return false, w.sendCommit(c, w.s.encodeFrames)
	}
	events := w.sub.Events()
	full := cap(events) / 4
linger:
	for range 2 {
		if len(events) >= full {
			break
		}
		if w.linger == nil {
			w.linger = time.NewTimer(batchLinger / 2)
		} else {
			w.linger.Reset(batchLinger / 2) // since Go 1.23, Reset also drains a fired timer
		}
		select {
		case <-w.linger.C:
		case <-w.s.stopping:
			w.linger.Stop()
			break linger
		}
	}
	batch := append(w.pending[:0], c)
more:
	for len(batch) < cap(events)+1 {
		select {
		case next, ok := <-events:
			if !ok {
				closed = true
				break more
			}
			batch = append(batch, next)
		default:
			break more
		}
	}
	err = w.sendCommits(batch, w.s.encodeFrames)
	clear(batch) // the commits are sent: do not hold them until the next batch
	w.pending = batch[:0]
	return closed, err
}

// batchPart is a batch entry's tag (BranchCommits.commits) as the frame's parts carry it.
var batchPart mem.Buffer = mem.SliceBuffer(batchEntryTag)

// sendCommits sends commits in order, several to a frame when they fit the response budget. A
// commit that does not fit a frame of its own ends the stream as sendCommit says, after the frames
// before it.
//
// A batch frame is sent as parts, not copied into one buffer: its tag and length, then for each
// commit the entry tag and the commit's shared frame after its own tag (the same length-delimited
// BranchCommit), so a batch costs the watcher no copy of the commits it carries; the transport
// copies the parts into its HTTP/2 frames, as it copies any message.
func (w *watch) sendCommits(commits []store.Commit, shared bool) error {
	if len(commits) == 1 {
		return w.sendCommit(commits[0], shared)
	}
	var (
		entries []*preEncoded // the frame's commits
		size    int           // the bytes of their entries
		last    uint64
	)
	flush := func() error {
		defer func() { entries, size = nil, 0 }()
		switch len(entries) {
		case 0:
			return nil
		case 1: // a batch of one is a commit frame: the shared bytes as they are
			return w.send(w.framePart(entries[0]), last)
		}
		return w.send(w.batchFrame(entries, size), last)
	}
	for _, c := range commits {
		f, n := w.commitBytes(c, shared)
		if f == nil { // over the limit on its own: sendCommit ends the stream, naming it
			if err := flush(); err != nil {
				return err
			}
			return w.sendCommit(c, shared)
		}
		if maxBatchTag+size+n > w.s.maxFrame {
			if err := flush(); err != nil {
				return err
			}
		}
		// f is the commit's frame, WatchBranchResponse{commit}: its entry in a batch is the same
		// length-delimited BranchCommit under BranchCommits' field 1, a tag of the same length.
		entries = append(entries, f)
		size += n
		last = commitLast(c)
	}
	return flush()
}

// commitBytes is c's commit frame as bytes (shared by its watchers when shared) and its size; nil
// when it does not fit in a frame.
func (w *watch) commitBytes(c store.Commit, shared bool) (*preEncoded, int) {
	frame, size := w.s.frames[b2i(w.render)].frame(c, w.render, shared, w.s.maxFrame)
	switch f := frame.(type) {
	case nil:
		return nil, size
	case *preEncoded:
		return f, len(f.b)
	case *historyv1.WatchBranchResponse:
		b, err := proto.Marshal(f)
		if err != nil || len(b) > w.s.maxFrame {
			return nil, max(size, len(b))
		}
		return newPreEncoded(b), len(b)
	}
	return nil, size
}

// batchFrame is the WatchBranchResponse{commits} frame of entries, whose entries take size bytes.
func (w *watch) batchFrame(entries []*preEncoded, size int) any {
	head := make([]byte, 0, maxBatchTag)
	head = append(head, batchFrameTag...)
	head = protowire.AppendVarint(head, uint64(size))
	parts := make(mem.BufferSlice, 0, 1+2*len(entries))
	parts = append(parts, mem.SliceBuffer(head))
	for _, e := range entries {
		parts = append(parts, batchPart, e.entry)
	}
	return w.framePart(&preEncodedParts{parts: parts})
}

// framePart is a marshalled frame as the stream sends it: as it is through requestCodec (every
// Server built by New), else decoded again for the default codec (handlers registered directly,
// in tests).
func (w *watch) framePart(f any) any {
	if w.s.encodeFrames {
		return f
	}
	var b []byte
	switch f := f.(type) {
	case *preEncoded:
		b = f.b
	case *preEncodedParts:
		b = f.parts.Materialize()
	}
	var resp historyv1.WatchBranchResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		panic("server: a batch frame spliced from valid frames does not decode: " + err.Error())
	}
	return &resp
}
