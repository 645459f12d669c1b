package server

import (
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/internal/store"
)

// A commit goes to every watcher of its branch, and converting it (rendering each message) and
// marshalling it cost more than sending it. So each published commit is converted and marshalled
// once, by the first of its watchers to send it, and the others send the same bytes: with 100
// watchers that is one conversion instead of 100 (BenchmarkWatchDelivery).
//
// The store hands every subscriber without a kinds filter the same Commit slice, so the address of
// its first event (with its length) names the commit; a replayed or filtered commit is a slice of
// its own and simply misses. A slot holds its commit alive, so an address is never reused while a
// slot names it.

const (
	// frameSlots is how many recent commits keep their frames: watchers of a branch are at most a
	// buffer (256 commits by default) apart, and most are within a few commits of each other.
	frameSlots = 256
	// maxSharedFrame bounds the frames kept, so the cache holds at most 16 MiB; a larger commit is
	// converted by each watcher (rare: a commit carrying a message of over 64 KiB).
	maxSharedFrame = 64 << 10
)

// frameCache maps recent commits to their frames.
type frameCache struct {
	slots [frameSlots]atomic.Pointer[sharedFrame]
	// maxRendered is the render cap of the frames' messages (--max-rendered-bytes; 0: the default).
	maxRendered int
}

type sharedFrame struct {
	first *store.Event
	n     int
	frame *preEncoded
}

// preEncoded is a frame already marshalled; requestCodec sends its bytes as they are. buf is b as
// a mem.Buffer and entry the frame as an entry of a batch frame without its tag (b after its
// commit tag), both made once with the frame so that sending it allocates nothing per watcher.
type preEncoded struct {
	b     []byte
	buf   mem.Buffer
	entry mem.Buffer
}

// newPreEncoded wraps the bytes of a WatchBranchResponse{commit} frame.
func newPreEncoded(b []byte) *preEncoded {
	return &preEncoded{b: b, buf: mem.SliceBuffer(b), entry: mem.SliceBuffer(b[len(commitFrameTag):])}
}

// preEncodedParts is a frame already marshalled in parts (a batch frame spliced from shared
// commit frames, history_watch_batch.go); requestCodec sends the parts as they are, in order.
type preEncodedParts struct{ parts mem.BufferSlice }

// frame returns c's frame, its messages rendered with render, and its size in bytes. With encode
// (the server's codec is requestCodec, as in every Server built by New) it is marshalled once and
// shared; without, each stream converts its own. A cache holds frames of one render setting.
//
// A frame is measured as it is built: past limit bytes (limit > 0) building stops and frame
// returns nil with the size reached, which is over limit (commitFrameWithin); a frame built whole
// and over limit is nil too, with its size. A cached frame fit the limit it was made under, the
// server's, which every caller passes.
func (fc *frameCache) frame(c store.Commit, render, encode bool, limit int) (any, int) {
	out := messageOut{maxRendered: fc.maxRendered, omitRendered: !render}
	if !encode {
		frame, size := commitFrameWithin(c, out, limit)
		if frame == nil || (limit > 0 && size > limit) {
			return nil, size
		}
		return frame, size
	}
	slot := &fc.slots[c[0].Sequence%frameSlots]
	if sf := slot.Load(); sf != nil && sf.first == &c[0] && sf.n == len(c) {
		return sf.frame, len(sf.frame.b)
	}
	frame, size := commitFrameWithin(c, out, limit)
	if frame == nil || (limit > 0 && size > limit) { // its early stop counts the frame's overhead at its least
		return nil, size
	}
	b, err := proto.Marshal(frame)
	if err != nil || len(b) > maxSharedFrame {
		return frame, len(b) // the stream's codec marshals it (and reports the error, if any)
	}
	shared := newPreEncoded(b)
	slot.Store(&sharedFrame{first: &c[0], n: len(c), frame: shared})
	return shared, len(b)
}

// Marshal encodes v as the proto codec does, except that a preEncoded frame is sent as its bytes
// and a preEncodedParts frame as its parts (see frameCache); the bytes are never written to, so
// every stream may send the same ones, and their Free does nothing (mem.SliceBuffer).
func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch p := v.(type) {
	case *preEncoded:
		return mem.BufferSlice{p.buf}, nil
	case *preEncodedParts:
		return p.parts, nil
	}
	return c.CodecV2.Marshal(v)
}
