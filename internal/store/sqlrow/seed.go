package sqlrow

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// Seed is a branch being built by CreateBranch, ImportBranch or
// ForkBranch: its initial messages come whole in the request, so the
// rules run over them in memory (store.BranchState), and the engine writes
// the branch in one transaction once built (Finish).
type Seed struct {
	Row   *Branch
	msgs  map[uuid.UUID]*Message
	order []uuid.UUID // the entries, by position
}

var _ store.BranchState = (*Seed)(nil)

// NewSeed starts a new branch's row: its identity and metadata, in
// store.Memory's order of checks, once the engine has found id free (a
// zero id is the engine's to mint). createdAt nil is now.
func NewSeed(id uuid.UUID, createdAt *float64, meta jsonv.Value) (*Seed, error) {
	meta, err := store.BranchMetadata(meta)
	if err != nil {
		return nil, err
	}
	created := store.NowSeconds()
	if createdAt != nil {
		created = *createdAt
	}
	return &Seed{Row: &Branch{
		ID: id, Incarnation: uuid.New(), CreatedAt: created, Metadata: meta,
		Pile: store.ElementID{ID: uuid.New(), CreatedAt: created},
		Prog: store.ElementID{ID: uuid.New(), CreatedAt: created},
	}, msgs: map[uuid.UUID]*Message{}}, nil
}

// BranchID is the new branch's id (store.BranchState).
func (b *Seed) BranchID() uuid.UUID { return b.Row.ID }

// HeadSequence is the new branch's head (store.BranchState).
func (b *Seed) HeadSequence() uint64 { return b.Row.Head }

// Current returns a message of the branch being built (store.BranchState).
func (b *Seed) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	m, ok := b.msgs[id]
	if !ok {
		return nil, false, nil
	}
	return m.Msg, true, nil
}

// CurrentSystem returns the system of the branch being built
// (store.BranchState).
func (b *Seed) CurrentSystem() (*envelope.Message, error) {
	if b.Row.SystemID == nil {
		return nil, nil
	}
	return b.msgs[*b.Row.SystemID].Msg, nil
}

// Add plans and applies one message with D3's rules (as store.Memory's
// seed), placed as a write places it (Place); field is the request field
// that gave it.
func (b *Seed) Add(msg *envelope.Message, field string) error {
	p, err := store.PlanMessage(b, msg, field)
	if err != nil {
		return err
	}
	old := b.msgs[msg.ID]
	if msg.Kind() == envelope.KindSystem && p.Excluded != nil {
		delete(b.msgs, p.Excluded.ID)
		b.Row.Count--
	}
	m := &Message{Msg: msg, Seq: 1}
	Place(b.Row, p, old, m)
	if p.Appends() {
		b.order = append(b.order, msg.ID)
	}
	b.msgs[msg.ID] = m
	return nil
}

// Create seeds a branch of CreateBranch, as store.Memory does: its name
// and user, the messages with D3's add-or-replace rule, then the system
// through the factory, then a pre-built system with set_system
// (store.CreateSeeds).
func (b *Seed) Create(in store.CreateBranchInput) error {
	b.Row.Name, b.Row.User = in.Name, in.User
	return store.CreateSeeds(b.Row.ID, in, func(sd store.Seed) error { return b.Add(sd.Message, sd.Field) })
}

// Import seeds a branch of ImportBranch from what the LionAGI JSON held.
func (b *Seed) Import(im store.Imported) error {
	b.Row.Name, b.Row.User = im.Name, im.User
	if im.Pile != nil {
		b.Row.Pile = *im.Pile
	}
	if im.Prog != nil {
		b.Row.Prog = *im.Prog
	}
	for i, msg := range im.Messages {
		if err := b.Add(msg, im.Paths[i]); err != nil {
			return err
		}
	}
	if im.CollRank != nil { // the collections order the import came with (issue 13 item 1)
		ranks := make(map[uuid.UUID]uint64, len(b.msgs))
		for id, m := range b.msgs {
			ranks[id] = uint64(m.Rank)
		}
		b.Row.NextRank = int64(store.ImportRanks(ranks, im.CollRank))
		for id, r := range ranks {
			b.msgs[id].Rank = int64(r)
		}
	}
	if im.Selected != nil {
		if err := store.CheckMembers(b, "data.metadata.current_progression.order", im.Selected.Order, true); err != nil {
			return err
		}
		b.Row.Selected = im.Selected
	}
	return nil
}

// Finish completes the row (its head: BRANCH_CREATED) and returns what
// writing the new branch takes.
func (b *Seed) Finish() Created {
	row := b.Row
	row.Head = 1
	ordered := make([]*Message, 0, len(b.msgs))
	if row.SystemID != nil {
		ordered = append(ordered, b.msgs[*row.SystemID])
	}
	for _, id := range b.order {
		ordered = append(ordered, b.msgs[id])
	}
	res := store.BranchResult{Messages: make([]store.StoredMessage, len(ordered))}
	msgs := make([]*envelope.Message, len(ordered))
	for i, m := range ordered {
		res.Messages[i], msgs[i] = m.Stored(), m.Msg
	}
	res.Branch = row.Info()
	info := row.Info()
	kept := store.BranchResult{Branch: res.Branch}
	if row.SystemID != nil {
		kept.Messages = res.Messages[:1]
	}
	return Created{
		Row: row, ordered: ordered, Result: res, Kept: kept,
		Commit: store.Commit{{Sequence: 1, CommitFirst: 1, CommitLast: 1, Kind: store.EventBranchCreated, Index: -1, Branch: &info, Messages: msgs}},
	}
}

// Created is a new branch as an engine writes it: its row, its message
// rows (InsertMessages), its BRANCH_CREATED (sequence 1), the call's
// result, and what a request id remembers of it (the branch and its
// system).
type Created struct {
	Row     *Branch
	ordered []*Message // the full order
	Commit  store.Commit
	Result  store.BranchResult
	Kept    store.BranchResult
}

// InsertMessages hands the engine's insert each message row of the new
// branch, in the full order, with its stored text.
func (c Created) InsertMessages(insert func(m *Message, body string) error) error {
	for _, m := range c.ordered {
		body, err := EncodeMessage(m.Msg)
		if err != nil {
			return err
		}
		if err := insert(m, body); err != nil {
			return err
		}
	}
	return nil
}
