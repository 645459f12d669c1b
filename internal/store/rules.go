package store

import (
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// The LionAGI rules (ADR-0006 D3, docs/design.md#branches) in one
// engine-neutral place: a branch's state and an input in, the placements
// (and so the events) out. Engines do the rest: persistence, indexing,
// locking, idempotency records, budgets. An engine reads the state under
// whatever orders the branch's writes (Memory: the branch lock; a database:
// its write transaction), runs a Plan function, and applies what comes out.
// So the rules are written once, and a new engine adds only storage.

// BranchState is what the rules read of one branch. Memory's branch
// implements it over its maps; a database engine implements it over its
// rows, inside the transaction that will apply the plan.
type BranchState interface {
	// BranchID is the branch's id.
	BranchID() uuid.UUID
	// HeadSequence is the sequence of the branch's last event.
	HeadSequence() uint64
	// Current returns the current message with id, if it is a member.
	Current(id uuid.UUID) (*envelope.Message, bool, error)
	// CurrentSystem returns the system at index 0, nil when there is none.
	CurrentSystem() (*envelope.Message, error)
}

// Placement is a validated write of one message: where it goes and what it
// replaces (ADR-0006 D3). An engine applies placements in order, each
// against the state the previous ones left.
type Placement struct {
	Message *envelope.Message
	// Replaces is set when the message's id is present (with the same
	// kind): it is rewritten at its index (for a System: at index 0, in
	// place).
	Replaces bool
	// Excluded is the previous system, removed when a new System takes
	// index 0 (ADR-0006 D3 "Single system"); the selected progression
	// names the new system where it named the old one.
	Excluded *envelope.Message
	// InPlace marks a change LionAGI makes to the object in place, which
	// keeps its collections rank (a request's action_response_id).
	InPlace bool
}

// Kind returns the event kind a placement writes.
func (p Placement) Kind() EventKind {
	switch {
	case p.Message.Kind() == envelope.KindSystem:
		return EventSystemSet
	case p.Replaces:
		return EventMessageReplaced
	}
	return EventMessageAdded
}

// Appends reports whether the placement adds a new entry at the end of the
// order (and of the views of its kind).
func (p Placement) Appends() bool {
	return p.Message.Kind() != envelope.KindSystem && !p.Replaces
}

// NewRank reports whether the message takes the next collections rank
// (issue 13 item 1): when it is inserted or re-inserted, not when it is
// changed in place and already ranked.
func (p Placement) NewRank(ranked bool) bool { return !ranked || !p.InPlace }

// Plan is what a write does to a branch: the placements of one commit, in
// sequence order, and the message the observers are told about (nil for
// writes that fire none, ADR-0006 D4).
type Plan struct {
	Placements []Placement
	Added      *envelope.Message
}

// CheckHead applies expected_head_sequence (docs/design.md#optimistic-concurrency).
func CheckHead(st BranchState, opts WriteOptions) error {
	if opts.ExpectedHead != nil && *opts.ExpectedHead != st.HeadSequence() {
		return &SequenceError{Err: ErrSequenceMismatch, BranchID: st.BranchID(), Head: st.HeadSequence()}
	}
	return nil
}

// PlanMessage validates writing msg with D3's rules: a System takes index 0
// (in place when it is the current system, replacing it otherwise); any
// other message already present is replaced at its index; a new one is
// appended. An id that is present with another kind is ErrKindChange
// naming field, the request field that gave msg.
func PlanMessage(st BranchState, msg *envelope.Message, field string) (Placement, error) {
	p := Placement{Message: msg}
	cur, exists, err := st.Current(msg.ID)
	if err != nil {
		return Placement{}, err
	}
	if exists && cur.Kind() != msg.Kind() {
		return Placement{}, &MessageError{Err: ErrKindChange, BranchID: st.BranchID(), MessageID: msg.ID, Field: field,
			Detail: "it is " + article(cur.Kind()) + ", not " + article(msg.Kind())}
	}
	p.Replaces = exists
	if msg.Kind() == envelope.KindSystem && !exists {
		if p.Excluded, err = st.CurrentSystem(); err != nil {
			return Placement{}, err
		}
	}
	return p, nil
}

// PlanSetSystem is set_system: the message must be a System.
func PlanSetSystem(st BranchState, system *envelope.Message) (Plan, error) {
	if system == nil || system.Kind() != envelope.KindSystem {
		return Plan{}, fieldErr("system", ErrNotSystem, "%s", NotSystemMessage)
	}
	p, err := PlanMessage(st, system, "system")
	if err != nil {
		return Plan{}, err
	}
	return Plan{Placements: []Placement{p}}, nil
}

// PlanAdd is add_message: the factory (or the pre-built message), then
// add-or-replace, then the request the message answered when that request
// is in the branch.
func PlanAdd(st BranchState, in AddInput) (Plan, error) {
	created, err := build(st, in)
	if err != nil {
		return Plan{}, err
	}
	field := ""
	if in.Message != nil {
		field = "message"
	}
	return planCreated(st, created, field)
}

// PlanActionResponse answers an ActionRequest of the branch.
func PlanActionResponse(st BranchState, in ActionResponseInput) (Plan, error) {
	req, err := actionRequest(st, in.Request, "action_request_id")
	if err != nil {
		return Plan{}, err
	}
	c, err := CreateActionResponse(&Factory{
		Sender: in.Sender, Recipient: in.Recipient,
		ActionRequestMsg: req, ActionOutput: in.Output, ActionError: in.Error,
	})
	if err != nil {
		return Plan{}, err
	}
	return planCreated(st, c, "")
}

// PlanCreated plans what the factory made for an AddMessage whose inputs
// name no message of the branch (no target, no action request): an engine
// may run the factory (CreateMessage) before it reads the branch, outside
// whatever orders the branch's writes, and plan its result here. The plan
// is PlanAdd's for the same inputs.
func PlanCreated(st BranchState, c Created) (Plan, error) { return planCreated(st, c, "") }

// planCreated plans what the factory made: the message, then the request it
// answered when that request is in the branch. field is the request field
// that gave the message, when the caller gave it whole.
func planCreated(st BranchState, c Created, field string) (Plan, error) {
	p, err := PlanMessage(st, c.Message, field)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{Placements: []Placement{p}, Added: c.Message}
	if c.Request != nil {
		_, inBranch, err := st.Current(c.Request.ID)
		if err != nil {
			return Plan{}, err
		}
		if inBranch {
			rp, err := PlanMessage(st, c.Request, "")
			if err != nil {
				return Plan{}, err
			}
			rp.InPlace = true // LionAGI links the request in place: it keeps its collections rank
			plan.Placements = append(plan.Placements, rp)
		}
	}
	return plan, nil
}

// build runs the factory with the named branch messages resolved, or takes
// the pre-built message. A target keeps its kind: an input of another kind
// is ErrKindChange naming target_id (docs/design.md#branches).
func build(st BranchState, in AddInput) (Created, error) {
	if in.Message != nil {
		if in.Target != nil || in.ActionRequest != nil || !in.Factory.empty() {
			return Created{}, ErrOneMessageType
		}
		return Created{Message: in.Message}, nil
	}
	f := &in.Factory // in is this call's copy: the factory may be completed in place
	if in.Target != nil {
		target, ok, err := st.Current(*in.Target)
		if err != nil {
			return Created{}, err
		}
		if !ok {
			return Created{}, &MessageError{Err: ErrMessageNotFound, BranchID: st.BranchID(), MessageID: *in.Target, Field: "target_id"}
		}
		kindChange := func(detail string) error {
			return &MessageError{Err: ErrKindChange, BranchID: st.BranchID(), MessageID: *in.Target, Field: "target_id",
				Detail: "the target is " + article(target.Kind()) + ", " + detail}
		}
		switch target.Kind() {
		case envelope.KindSystem:
			f.SystemMsg = target
		case envelope.KindInstruction:
			f.InstructionMsg = target
		case envelope.KindAssistantResponse:
			f.AssistantMsg = target
		case envelope.KindActionRequest:
			f.ActionRequestMsg = target
		case envelope.KindActionResponse:
			f.ActionResponseMsg = target
		default:
			return Created{}, kindChange("which no input updates")
		}
		switch {
		case f.messageTypes() > 1:
			return Created{}, ErrOneMessageType // LionAGI's check comes first
		case in.TargetKind != nil && *in.TargetKind != target.Kind():
			return Created{}, kindChange("and the input is for " + article(*in.TargetKind))
		}
		if name := f.otherKindInput(target.Kind()); name != "" {
			return Created{}, kindChange("and " + name + " is not one of its inputs")
		}
	}
	if in.ActionRequest != nil {
		req, err := actionRequest(st, *in.ActionRequest, "action_output.action_request_id")
		if err != nil {
			return Created{}, err
		}
		f.ActionRequestMsg = req
	}
	return CreateMessage(f)
}

// article names a message kind with its article ("an Instruction").
func article(k envelope.Kind) string {
	name := k.String()
	if strings.ContainsRune("AEIOU", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

// actionRequest returns the ActionRequest named by the request field
// field.
func actionRequest(st BranchState, id uuid.UUID, field string) (*envelope.Message, error) {
	m, ok, err := st.Current(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &MessageError{Err: ErrMessageNotFound, BranchID: st.BranchID(), MessageID: id, Field: field}
	}
	if m.Kind() != envelope.KindActionRequest {
		return nil, &MessageError{Err: ErrNotActionRequest, BranchID: st.BranchID(), MessageID: id, Field: field}
	}
	return m, nil
}

// CheckMembers checks that every id of an order is a message of the branch
// (and, with unique, appears once), else ErrInvalidProgression naming the
// first offender (ADR-0006 D3).
func CheckMembers(st BranchState, field string, ids []uuid.UUID, unique bool) error {
	var seen map[uuid.UUID]bool
	if unique {
		seen = make(map[uuid.UUID]bool, len(ids))
	}
	for i, id := range ids {
		_, ok, err := st.Current(id)
		if err != nil {
			return err
		}
		if ok && unique {
			ok = !seen[id]
			seen[id] = true
		}
		if !ok {
			return &MessageError{Err: ErrInvalidProgression, BranchID: st.BranchID(), MessageID: id, Field: field + "[" + strconv.Itoa(i) + "]"}
		}
	}
	return nil
}

// PlanProgression validates a selected progression to set: every id a
// member, once. nil unsets it; a set order is never nil.
func PlanProgression(st BranchState, order *[]uuid.UUID) ([]uuid.UUID, error) {
	if order == nil {
		return nil, nil
	}
	ids := slices.Clone(*order)
	if ids == nil {
		ids = []uuid.UUID{}
	}
	if err := CheckMembers(st, "progression.ids", ids, true); err != nil {
		return nil, err
	}
	return ids, nil
}

// ClearedOrder is clear_messages' effect on the selected progression:
// only the system (keep, nil when none) survives. changed is false when
// nothing was dropped.
func ClearedOrder(order []uuid.UUID, keep *uuid.UUID) (kept []uuid.UUID, changed bool) {
	kept = slices.DeleteFunc(slices.Clone(order), func(id uuid.UUID) bool {
		return keep == nil || id != *keep
	})
	return kept, len(kept) != len(order)
}

// Seed is one message a new branch is built from, with the request field
// that gave it (empty when the caller gave none).
type Seed struct {
	Message *envelope.Message
	Field   string
}

// CheckCreate checks a CreateBranch input before anything is built: a
// pre-built system must be a System, and the name and user hold no NUL
// (CheckBranchTexts).
func CheckCreate(in CreateBranchInput) error {
	if in.SystemMessage != nil && in.SystemMessage.Kind() != envelope.KindSystem {
		return fieldErr("system", ErrNotSystem, "%s", NotSystemMessage)
	}
	return CheckBranchTexts("", in.Name, in.User)
}

// CheckFork checks a ForkBranch input before the source is read: the
// new branch's name holds no NUL (CheckBranchTexts).
func CheckFork(in ForkInput) error { return CheckBranchTexts("", in.Name, nil) }

// CheckBranchTexts refuses a branch name or user that holds U+0000, on
// every engine alike: they are kept in text columns, which PostgreSQL's
// TEXT cannot hold NUL in (docs/decisions/0012 row 24). prefix is the
// fields' path in the request ("data." for ImportBranch's JSON).
func CheckBranchTexts(prefix string, name, user *string) error {
	for _, f := range []struct {
		field string
		v     *string
	}{{"name", name}, {"user", user}} {
		if f.v == nil {
			continue
		}
		if err := envelope.CheckNoNUL(prefix+f.field, *f.v); err != nil {
			return err
		}
	}
	return nil
}

// CreateSeeds hands seed what CreateBranch writes, in order, as LionAGI's
// Branch(...) and MessageManager(messages=, system=) do: the messages with
// D3's add-or-replace rule, then the system through the factory (sender:
// SystemSender, else User, else "system"; recipient: the branch id), then a
// pre-built system with set_system. seed plans each with PlanMessage
// against the branch as the previous ones left it; its first error ends
// the seeding.
func CreateSeeds(id uuid.UUID, in CreateBranchInput, seed func(Seed) error) error {
	for i, msg := range in.Messages {
		if err := seed(Seed{msg, "messages[" + strconv.Itoa(i) + "]"}); err != nil {
			return err
		}
	}
	if in.System.Truthy() || in.SystemDatetime.Truthy() {
		sender := "system"
		switch {
		case in.SystemSender != nil && *in.SystemSender != "":
			sender = *in.SystemSender
		case in.User != nil && *in.User != "":
			sender = *in.User
		}
		c, err := CreateMessage(&Factory{
			System: in.System, SystemDatetime: in.SystemDatetime,
			Sender: jsonv.StringValue(sender), Recipient: jsonv.StringValue(id.String()),
		})
		if err != nil {
			return prefixErr("system", err)
		}
		if err := seed(Seed{c.Message, "system"}); err != nil {
			return err
		}
	}
	if in.SystemMessage != nil {
		return seed(Seed{in.SystemMessage, "system"})
	}
	return nil
}

// ImportRanks gives an imported branch's messages the collections order
// the import came with (issue 13 item 1): ranks holds the ranks the
// seeding gave; it returns the next rank.
func ImportRanks(ranks, collRank map[uuid.UUID]uint64) uint64 {
	var next uint64
	for id := range ranks {
		if r, ok := collRank[id]; ok {
			ranks[id] = r
			next = max(next, r+1)
		}
	}
	for id, r := range ranks { // none expected: every message came from the collections
		if _, ok := collRank[id]; !ok {
			ranks[id] = next + r
		}
	}
	return next + uint64(len(ranks))
}
