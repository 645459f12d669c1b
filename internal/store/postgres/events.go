package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// The retained event log's rows (docs/design.md#sequences): keyed by the
// branch's incarnation, so a subscriber reading a deleted branch's log
// through BRANCH_DELETED is not disturbed by a new branch of the same id.
// body carries what the event wrote as it wrote it: the message
// (MESSAGE_ADDED, MESSAGE_REPLACED, SYSTEM_SET), the branch and its initial
// messages (BRANCH_CREATED), the progression (PROGRESSION_SET).

// eventBody is an event's body column.
type eventBody struct {
	Message  json.RawMessage   `json:"m,omitempty"`
	Branch   *infoJSON         `json:"b,omitempty"`
	Messages []json.RawMessage `json:"ms,omitempty"`
	// Progression is set for PROGRESSION_SET: null when it unset the
	// progression.
	Progression *[]uuid.UUID `json:"p,omitempty"`
}

// infoJSON is a BranchInfo as an event body or a remembered result keeps it.
type infoJSON struct {
	ID          uuid.UUID       `json:"id"`
	Incarnation uuid.UUID       `json:"inc"`
	CreatedAt   float64         `json:"created_at"`
	Metadata    json.RawMessage `json:"metadata"`
	Name        *string         `json:"name,omitempty"`
	User        *string         `json:"user,omitempty"`
	Parent      *uuid.UUID      `json:"parent,omitempty"`
	ForkPoint   *uuid.UUID      `json:"fork_point,omitempty"`
	Head        uint64          `json:"head"`
	Count       int             `json:"count"`
	SystemID    *uuid.UUID      `json:"system_id,omitempty"`
	Selected    bool            `json:"selected,omitempty"`
}

func encodeInfo(in store.BranchInfo) *infoJSON {
	return &infoJSON{
		ID: in.ID, Incarnation: in.Incarnation, CreatedAt: in.CreatedAt, Metadata: jsonv.Marshal(in.Metadata),
		Name: in.Name, User: in.User, Parent: in.ParentBranchID, ForkPoint: in.ForkPoint,
		Head: in.HeadSequence, Count: in.MessageCount, SystemID: in.SystemID, Selected: in.Selected,
	}
}

func (j *infoJSON) decode() (store.BranchInfo, error) {
	meta, err := jsonv.ParseDepth(j.Metadata, storedDepth)
	if err != nil {
		return store.BranchInfo{}, err
	}
	return store.BranchInfo{
		ID: j.ID, Incarnation: j.Incarnation, CreatedAt: j.CreatedAt, Metadata: meta,
		Name: j.Name, User: j.User, ParentBranchID: j.Parent, ForkPoint: j.ForkPoint,
		HeadSequence: j.Head, MessageCount: j.Count, SystemID: j.SystemID, Selected: j.Selected,
	}, nil
}

// encodeEvent writes the body column of an event that wrote no message row
// (insertEvents): BRANCH_CREATED's branch and initial messages,
// PROGRESSION_SET's progression; nil for the others.
func encodeEvent(ev store.Event) (any, error) {
	var b eventBody
	switch {
	case ev.Kind == store.EventBranchCreated && ev.Branch != nil:
		b.Branch = encodeInfo(*ev.Branch)
		b.Messages = make([]json.RawMessage, len(ev.Messages))
		for i, m := range ev.Messages {
			raw, err := m.MarshalJSON()
			if err != nil {
				return nil, err
			}
			b.Messages[i] = raw
		}
	case ev.Kind == store.EventProgressionSet && ev.Progression != nil:
		p := ev.Progression
		b.Progression = &p
	case ev.Kind == store.EventProgressionSet:
		// unset: an empty body, which decodes to no progression
	default:
		return nil, nil
	}
	out, err := json.Marshal(b)
	return string(out), err
}

// decodeEvent reads an event row's body into ev.
func decodeEvent(ev *store.Event, body *string) error {
	if body == nil {
		return nil
	}
	var b eventBody
	if err := json.Unmarshal([]byte(*body), &b); err != nil {
		return damagedRowError{fmt.Errorf("an event body: %w", err)}
	}
	if b.Message != nil {
		m, err := decodeMessage(string(b.Message))
		if err != nil {
			return err
		}
		ev.Message = m
	}
	if b.Branch != nil {
		info, err := b.Branch.decode()
		if err != nil {
			return err
		}
		ev.Branch = &info
		ev.Messages = make([]*envelope.Message, len(b.Messages))
		for i, raw := range b.Messages {
			if ev.Messages[i], err = decodeMessage(string(raw)); err != nil {
				return err
			}
		}
	}
	if b.Progression != nil {
		ev.Progression = *b.Progression
		if ev.Progression == nil {
			ev.Progression = []uuid.UUID{}
		}
	}
	return nil
}

// messageEventBody is the body of an event that wrote the message stored
// as body.
func messageEventBody(body string) string { return `{"m":` + body + `}` }

// insertEvents writes a commit's events (their sequences, commit bounds
// and indexes set) to the log of incarnation, in one round trip. An event
// that wrote a message keeps no copy of it: it reads the message's current
// version (qEvents) until that version is rewritten or deleted
// (keepVersion). They are queued in b, the write's batch.
func insertEvents(b *pgx.Batch, incarnation uuid.UUID, c store.Commit) error {
	for _, ev := range c {
		var (
			body  any
			msgID any
			err   error
		)
		if ev.Message != nil && ev.Kind != store.EventBranchCreated {
			msgID = ev.Message.ID
		} else if body, err = encodeEvent(ev); err != nil {
			return err
		}
		b.Queue(qInsertEvent, incarnation, int64(ev.Sequence), int64(ev.CommitFirst), int64(ev.CommitLast), int(ev.Kind), ev.Index, msgID, body)
	}
	return nil
}

// readEvents reads the events of the branch's incarnation in (after,
// through], at most limit of them, in sequence order, in one statement.
func readEvents(ctx context.Context, q querier, branch, incarnation uuid.UUID, after, through uint64, limit int) ([]store.Event, error) {
	rows, err := q.Query(ctx, qEvents, branch, incarnation, int64(after), int64(through), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var (
			ev                   store.Event
			seq, first, last, ix int64
			kind                 int
			body                 *string
		)
		if err := rows.Scan(&seq, &first, &last, &kind, &ix, &body); err != nil {
			return nil, err
		}
		ev.Sequence, ev.CommitFirst, ev.CommitLast, ev.Index = uint64(seq), uint64(first), uint64(last), int(ix)
		ev.Kind = store.EventKind(kind)
		switch ev.Kind {
		case store.EventMessageAdded, store.EventMessageReplaced, store.EventSystemSet:
			if body == nil { // its message is neither in the event nor the current version
				return nil, damagedRowError{fmt.Errorf("event %d of incarnation %s has lost the message it wrote", ev.Sequence, incarnation)}
			}
		}
		if err := decodeEvent(&ev, body); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}
