package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// firstOr is FirstIfRaced over the memory engine's records.
func (m *Memory) firstOr(err error, principal string, op Op, requestID string) (BranchResult, error) {
	return FirstIfRaced(err, requestID, func() (BranchResult, bool, error) { return m.recallCreated(principal, op, requestID) })
}

// prepare builds a new, unpublished branch: its identity, metadata and
// charge. The caller seeds it and then calls publish or discard.
func (m *Memory) prepare(id uuid.UUID, createdAt *float64, meta jsonv.Value) (*branch, error) {
	if id == (uuid.UUID{}) {
		id = uuid.New()
	} else if _, err := m.lookup(id); err == nil {
		return nil, &BranchError{Err: ErrBranchExists, BranchID: id}
	}
	meta, err := envelope.NormalizeMetadata(meta)
	if err != nil {
		return nil, fieldErr("metadata", envelope.ErrInvalid, "invalid metadata: not a JSON object (got %s)", meta.Kind())
	}
	created := nowSeconds()
	if createdAt != nil {
		created = *createdAt
	}
	b := newBranch(m, id, created)
	b.metadata = meta
	b.charge = branchOverhead + valueSize(meta)
	if err := m.budget.reserve(b.charge); err != nil {
		return nil, err
	}
	return b, nil
}

// seed writes a message into a branch being built, with D3's rules; field
// is the request field that gave it.
func (m *Memory) seed(b *branch, msg *envelope.Message, field string) error {
	p, err := PlanMessage(b, msg, field)
	if err != nil {
		return err
	}
	size := messageSize(msg)
	if err := m.budget.reserve(size); err != nil {
		return err
	}
	m.apply(b, p, 1, size)
	return nil
}

// discard gives back everything a branch holds: a branch being built that
// failed, or a deleted one, which no call reads any more (its deleted flag
// is set); so no lock is needed, and a big branch holds up nobody.
func (m *Memory) discard(b *branch) {
	for _, v := range b.msgs {
		m.unref(v)
	}
	for i := 0; i < b.log.len(); i++ {
		m.drop(b.log.at(i))
	}
	m.budget.release(b.charge)
	b.msgs, b.log = nil, eventLog{}
}

// publish records BRANCH_CREATED and makes the branch visible; a repeat of
// the request id returns the first result instead and an id taken in the
// meantime is ErrBranchExists (b is then discarded). The record of the
// request id is charged first: one that does not fit refuses the create.
func (m *Memory) publish(b *branch, op Op, principal, requestID string) (BranchResult, error) {
	versions := b.versions(b.order())
	msgs := make([]*envelope.Message, len(versions))
	res := BranchResult{Messages: make([]StoredMessage, len(versions))}
	for i, v := range versions {
		msgs[i] = v.msg
		res.Messages[i] = v.stored()
	}
	b.head = 1
	info := b.info()
	m.record(b, []loggedEvent{{ev: Event{Sequence: 1, Kind: EventBranchCreated, Index: -1, Branch: &info, Messages: msgs}, versions: versions}})
	res.Branch = b.info()
	kept := branchResponse(res, b.system) // before b is visible to others
	scope := creatorScope(principal)
	charge, err := m.requests.reserve(scope, requestID, kept.extra)
	if err != nil {
		m.discard(b)
		return BranchResult{}, err
	}
	first, err := m.register(b, op, scope, requestID, res, kept, charge)
	if err != nil || first.Replayed {
		m.requests.release(charge)
		m.discard(b)
	}
	return first, err
}

// register puts a built branch in the map and remembers kept under its
// request id, under the store lock; a repeat of the request id returns
// the first result (Replayed) and an id taken in the meantime is
// ErrBranchExists. The new branch is a new scope: the deletes remembered
// for an earlier branch of its id are forgotten (issue 13 item 13), as
// that branch's writes were when it was deleted.
func (m *Memory) register(b *branch, op Op, scope requestScope, requestID string, res BranchResult, kept response, charge int64) (BranchResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first, ok, err := m.recallCreated(scope.principal, op, requestID); err != nil || ok {
		return first, err
	}
	if _, taken := m.branches[b.id]; taken {
		return BranchResult{}, &BranchError{Err: ErrBranchExists, BranchID: b.id}
	}
	m.branches[b.id] = b
	m.insertID(b.id)
	// A branch made under the id of a deleted one is another branch: the
	// deleted one's DeleteBranch request ids no longer answer for the id
	// (issue 11, issue 13 item 13).
	m.requests.forgetScope(deleteScope(b.id))
	m.requests.put(m.opts.now(), scope, op, requestID, kept, charge)
	return res, nil
}

// CreateBranch creates a branch (Store.CreateBranch), as LionAGI's
// Branch(...) and MessageManager(messages=, system=) do: the messages with
// D3's add-or-replace rule, then the system through the factory (sender:
// SystemSender, else User, else "system"; recipient: the branch id), then a
// pre-built system with set_system.
func (m *Memory) CreateBranch(_ context.Context, in CreateBranchInput) (BranchResult, error) {
	if r, ok, err := m.recallCreated(in.Principal, OpCreateBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	if err := CheckCreate(in); err != nil {
		return BranchResult{}, err
	}
	b, err := m.prepare(in.ID, in.CreatedAt, in.Metadata)
	if err != nil {
		return m.firstOr(err, in.Principal, OpCreateBranch, in.RequestID)
	}
	b.name, b.user = in.Name, in.User
	if err := CreateSeeds(b.id, in, func(s Seed) error { return m.seed(b, s.Message, s.Field) }); err != nil {
		m.discard(b)
		return BranchResult{}, err
	}
	return m.publish(b, OpCreateBranch, in.Principal, in.RequestID)
}

// ImportBranch creates a branch from LionAGI JSON (Store.ImportBranch).
func (m *Memory) ImportBranch(_ context.Context, in ImportInput) (BranchResult, error) {
	if r, ok, err := m.recallCreated(in.Principal, OpImportBranch, in.RequestID); err != nil || ok {
		return r, err
	}
	im, err := parseImport(in.Data, in.DBMetaKey)
	if err != nil {
		return BranchResult{}, err
	}
	b, err := m.prepare(in.BranchID(im.id), im.createdAt, im.metadata)
	if err != nil {
		return m.firstOr(err, in.Principal, OpImportBranch, in.RequestID)
	}
	b.name, b.user = im.name, im.user
	if im.pile != nil {
		b.pile = *im.pile
	}
	if im.prog != nil {
		b.prog = *im.prog
	}
	for i, msg := range im.messages {
		if err := m.seed(b, msg, im.paths[i]); err != nil {
			m.discard(b)
			return BranchResult{}, err
		}
	}
	if im.collRank != nil { // the collections order the import came with (issue 13 item 1)
		ranks := make(map[uuid.UUID]uint64, len(b.msgs))
		for id, v := range b.msgs {
			ranks[id] = v.rank
		}
		b.nextRank = ImportRanks(ranks, im.collRank)
		for id, v := range b.msgs { // b is not visible yet: nobody reads these versions
			v.rank = ranks[id]
		}
	}
	if im.selected != nil {
		if err := CheckMembers(b, "data.metadata.current_progression.order", im.selected.Order, true); err != nil {
			m.discard(b)
			return BranchResult{}, err
		}
		b.selected = im.selected
	}
	return m.publish(b, OpImportBranch, in.Principal, in.RequestID)
}

// DeleteBranch deletes a branch (Store.DeleteBranch): BRANCH_DELETED is its
// last event, its subscriptions end with ErrBranchDeleted, and everything it
// held goes back to the budget, the responses remembered for its writes
// included. Its request id is remembered under the branch id, since the
// branch's own scope goes with it.
//
// It never holds the store lock while it waits for the branch lock, nor
// the reverse: a long reader of this branch holds up no other branch. The
// branch is marked deleted under its own lock (from then on no call reads
// it), then taken out of the map under the store lock, then its memory is
// given back under neither.
func (m *Memory) DeleteBranch(_ context.Context, id uuid.UUID, opts WriteOptions) (DeleteResult, error) {
	scope := deleteScope(id)
	recall := func() (DeleteResult, bool, error) {
		r, ok, err := m.requests.get(m.opts.now(), scope, OpDeleteBranch, opts.RequestID)
		if err != nil || !ok {
			return DeleteResult{}, false, err
		}
		res := r.(DeleteResult)
		res.Replayed = true
		return res, true, nil
	}
	if res, ok, err := recall(); err != nil || ok {
		return res, err
	}
	b, err := m.writeLocked(id)
	if err != nil {
		// A repeat that raced with the first call finds the branch gone
		// and the first result remembered (it is put before the branch
		// leaves the map).
		if res, ok, rerr := recall(); rerr != nil || ok {
			return res, rerr
		}
		return DeleteResult{}, err
	}
	res, err := m.markDeleted(b, scope, opts)
	if err != nil {
		return DeleteResult{}, err
	}
	m.mu.Lock()
	if m.branches[id] == b {
		delete(m.branches, id)
		m.removeID(id)
	}
	m.mu.Unlock()
	m.requests.forgetScope(branchScope(b))
	m.discard(b)
	return res, nil
}

// markDeleted records BRANCH_DELETED (publishing it ends every
// subscription), marks the branch deleted and remembers the result; it
// releases the branch lock, which the caller took.
func (m *Memory) markDeleted(b *branch, scope requestScope, opts WriteOptions) (DeleteResult, error) {
	defer b.mu.Unlock()
	if err := CheckHead(b, opts); err != nil {
		return DeleteResult{}, err
	}
	m.budget.used.Add(eventOverhead) // deleting frees memory: never refused
	m.recordEvent(b, Event{Kind: EventBranchDeleted}, eventOverhead)
	b.deleted = true
	res := DeleteResult{BranchID: b.id, LastSequence: b.head}
	m.requests.putFreeing(m.opts.now(), scope, OpDeleteBranch, opts.RequestID, response{result: res})
	return res, nil
}

// ExportBranch writes the branch as LionAGI JSON (Store.ExportBranch).
func (m *Memory) ExportBranch(_ context.Context, id uuid.UUID, in ExportInput) (Export, error) {
	if in.Mode > envelope.ModeDB {
		return Export{}, fieldErr("mode", envelope.ErrUnsupportedMode, "Unsupported mode: %d", in.Mode)
	}
	b, err := m.readLocked(id)
	if err != nil {
		return Export{}, err
	}
	src := b.exportSource()
	b.mu.RUnlock()
	m.unlocked()
	if in.Each != nil { // before the encoding, which is what a refusal spares
		for i, v := range src.versions {
			if err := in.Each(i, v.msg); err != nil {
				return Export{}, err
			}
		}
	}
	data, err := src.encode(in.Mode, in.DBMetaKey)
	if err != nil {
		return Export{}, err
	}
	return Export{Data: data, Head: src.head}, nil
}
