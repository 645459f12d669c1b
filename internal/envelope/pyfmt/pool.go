package pyfmt

import "sync"

// renderState is the scratch space of one rendering, pooled because
// rendering runs for every message of every ToChatMessages: the output
// grows in a reused buffer and is copied out once, as the result string.
type renderState struct {
	emitter emitter
	buf     []byte // for Str and Repr
}

// maxPooledBuffer keeps one unusually large rendering from pinning its
// buffer in the pool for good.
const maxPooledBuffer = 64 << 10

var statePool = sync.Pool{New: func() any {
	return &renderState{
		emitter: emitter{buf: make([]byte, 0, 4096), indents: make([]int, 0, 16)},
		buf:     make([]byte, 0, 1024),
	}
}}

func getState() *renderState { return statePool.Get().(*renderState) }

func putState(st *renderState) {
	if cap(st.emitter.buf) > maxPooledBuffer || cap(st.buf) > maxPooledBuffer {
		return
	}
	st.emitter = emitter{buf: st.emitter.buf[:0], indents: st.emitter.indents[:0]}
	st.buf = st.buf[:0]
	statePool.Put(st)
}
