//go:build e2e

package e2e

import (
	"maps"
	"slices"
	"strings"
	"sync"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The crash harness's model (crash_test.go): what the server has acknowledged, and nothing else. A
// write in flight at a kill is not in it: it is "unknown" until its retry after the restart is
// acknowledged, and only then applied. After the retries every write the server ever committed has
// been acknowledged, so the checker can demand the model exactly: each branch's messages, the
// sequence of each event, and no message or branch the model does not know.

// crashModel is the acknowledged state, shared by the writer goroutines under mu.
type crashModel struct {
	mu       sync.Mutex
	branches map[string]*mBranch // by name: every branch the harness asked for, deleted ones too
	acked    int                 // acknowledged writes, retries included
}

// mBranch is one branch as acknowledged. Its name is a unique token the harness chooses (CreateBranch
// and ForkBranch take a name, an import carries it in its payload), so a branch whose id only the
// server knows can still be found, and a duplicate shows as two branches of one name.
type mBranch struct {
	name    string
	id      string
	owner   int  // the writer that alone writes it; sharedOwner for the branch every writer appends to
	fork    bool // a fork is never written to, only deleted: its clones' ids are the server's
	deleted bool
	msgs    map[uint64]*mMsg // by index: concurrent appends to the shared branch are acknowledged out of order
	events  map[uint64]mEvent
	// progression is the last acknowledged SetProgression's ids (hasProgression false: none).
	progression    []string
	hasProgression bool
}

// sharedOwner marks the branch every writer appends to concurrently.
const sharedOwner = -1

// mMsg is one message as acknowledged.
type mMsg struct {
	id        string // "" for a fork's clone, known by cloneFrom
	cloneFrom string
	seq       uint64 // the sequence of its last acknowledged write
	text      string // an instruction's text: the request id that wrote it
	action    bool   // an ActionRequest
	answered  bool   // an ActionRequest whose CreateActionResponse was acknowledged
}

// mEvent is an event the model expects at a sequence: its kind and the message it wrote.
type mEvent struct {
	kind historyv1.EventKind
	msg  string
}

func newCrashModel() *crashModel {
	return &crashModel{branches: map[string]*mBranch{}}
}

// add registers a branch the harness is about to ask for, before the request: a retry after a kill
// then finds it by name.
func (m *crashModel) add(b *mBranch) {
	b.msgs, b.events = map[uint64]*mMsg{}, map[uint64]mEvent{}
	m.branches[b.name] = b
}

// created applies an acknowledged create, fork or import: the branch exists, at sequence 1.
func (b *mBranch) created(r *historyv1.Branch) {
	b.id = r.GetId()
	b.events[1] = mEvent{kind: historyv1.EventKind_EVENT_KIND_BRANCH_CREATED}
}

// put applies an acknowledged message write at index.
func (b *mBranch) put(index uint64, msg *mMsg, kind historyv1.EventKind) {
	b.msgs[index] = msg
	b.events[msg.seq] = mEvent{kind: kind, msg: msg.id}
}

// live reports whether the branch should exist: acknowledged and not deleted.
func (b *mBranch) live() bool { return b.id != "" && !b.deleted }

// list returns the messages in index order, past any hole: what a writer plans from, even once a
// violation has left the model unsure.
func (b *mBranch) list() []*mMsg {
	out := make([]*mMsg, 0, len(b.msgs))
	for _, i := range slices.Sorted(maps.Keys(b.msgs)) {
		out = append(out, b.msgs[i])
	}
	return out
}

// sortBranches sorts by name: map order is random, and a seed must replay the same choices.
func sortBranches(bs []*mBranch) {
	slices.SortFunc(bs, func(a, b *mBranch) int { return strings.Compare(a.name, b.name) })
}
