package rowjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// Depth is the nesting a stored JSON value is read back with: it was
// checked against the request's limits when it was written.
const Depth = 1 << 20

// Codec reads what an engine stored, with the engine's own reading of a
// message's text (which words a damaged row as the engine does).
type Codec struct {
	// Name prefixes errors ("sqlite", "postgres").
	Name string
	// DecodeMessage reads a message's stored text.
	DecodeMessage func(body string) (*envelope.Message, error)
	// BodyError wraps a stored body that does not decode (an event's, a
	// remembered result's): a row the engine wrote and cannot read back,
	// which the engine words as damage (DATA_LOSS), not as its own fault.
	BodyError func(error) error
}

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
	meta, err := jsonv.ParseDepth(j.Metadata, Depth)
	if err != nil {
		return store.BranchInfo{}, err
	}
	return store.BranchInfo{
		ID: j.ID, Incarnation: j.Incarnation, CreatedAt: j.CreatedAt, Metadata: meta,
		Name: j.Name, User: j.User, ParentBranchID: j.Parent, ForkPoint: j.ForkPoint,
		HeadSequence: j.Head, MessageCount: j.Count, SystemID: j.SystemID, Selected: j.Selected,
	}, nil
}

// EncodeEvent writes the body column of an event that wrote no message row
// (insertEvents): BRANCH_CREATED's branch and initial messages,
// PROGRESSION_SET's progression; nil for the others.
func EncodeEvent(ev store.Event) (any, error) {
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

// EventColumns returns what an event's row holds of it: an event that
// wrote a message (not BRANCH_CREATED, whose body carries its messages)
// keeps no copy of it and refers to its row, msgID, reading the message's
// current version until that version is rewritten or deleted (the
// engine's keepVersion then gives it a body); the others hold their body
// (EncodeEvent).
func EventColumns(ev store.Event) (msgID *uuid.UUID, body any, err error) {
	if ev.Message != nil && ev.Kind != store.EventBranchCreated {
		return &ev.Message.ID, nil, nil
	}
	body, err = EncodeEvent(ev)
	return nil, body, err
}

// WroteMessage reports whether an event of kind wrote a message: its row
// read back must hold one, in its body or by reference.
func WroteMessage(kind store.EventKind) bool {
	switch kind {
	case store.EventMessageAdded, store.EventMessageReplaced, store.EventSystemSet:
		return true
	}
	return false
}

// MessageEventBody is the body of an event that wrote the message stored
// as body.
func MessageEventBody(body string) string { return `{"m":` + body + `}` }

// DecodeEvent reads an event row's body (not NULL) into ev.
func (c Codec) DecodeEvent(ev *store.Event, body string) error {
	var b eventBody
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		return c.BodyError(fmt.Errorf("an event body: %w", err))
	}
	if b.Message != nil {
		m, err := c.DecodeMessage(string(b.Message))
		if err != nil {
			return err
		}
		ev.Message = m
	}
	if b.Branch != nil {
		info, err := b.Branch.decode()
		if err != nil {
			return c.BodyError(fmt.Errorf("an event's branch: %w", err))
		}
		ev.Branch = &info
		ev.Messages = make([]*envelope.Message, len(b.Messages))
		for i, raw := range b.Messages {
			if ev.Messages[i], err = c.DecodeMessage(string(raw)); err != nil {
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

// resultJSON is a remembered result: one of a write's, a branch-creating
// call's (the branch and its system, the one message a response carries)
// or a delete's. A write's is written without it (encodeWriteResult, which
// a field added here for write results must follow) and read back with it.
type resultJSON struct {
	Message  *storedJSON `json:"m,omitempty"`
	Index    int         `json:"i,omitempty"`
	Updated  *storedJSON `json:"u,omitempty"`
	Head     uint64      `json:"h,omitempty"`
	Branch   *infoJSON   `json:"b,omitempty"`
	System   *storedJSON `json:"s,omitempty"`
	BranchID *uuid.UUID  `json:"d,omitempty"`
	Last     uint64      `json:"l,omitempty"`
}

type storedJSON struct {
	Message  json.RawMessage `json:"m"`
	Sequence uint64          `json:"s"`
}

func encodeStored(m store.StoredMessage) (*storedJSON, error) {
	if m.Message == nil {
		return nil, nil
	}
	raw, err := m.Message.MarshalJSON()
	return &storedJSON{Message: raw, Sequence: m.Sequence}, err
}

func (c Codec) decodeStored(j *storedJSON) (store.StoredMessage, error) {
	if j == nil {
		return store.StoredMessage{}, nil
	}
	m, err := c.DecodeMessage(string(j.Message))
	return store.StoredMessage{Message: m, Sequence: j.Sequence}, err
}

// EncodeResult writes a result a request id remembers.
func EncodeResult(result any) (string, error) { return EncodeResultKnown(result, nil) }

// EncodeResultKnown is EncodeResult taking the text of a result's message from known when it has
// it (the message's MarshalJSON, which the engine already made to store the message; nil: none
// known). A write result, the one kind every write with a request id remembers, is written
// directly, as json.Marshal writes resultJSON but with the message's text as it is: Marshal
// encoded the message again and then checked and compacted that text a second time (a sixth of
// what a request id added to a sqlite write's CPU, on the single writer).
func EncodeResultKnown(result any, known func(*envelope.Message) (string, bool)) (string, error) {
	var (
		j   resultJSON
		err error
	)
	switch r := result.(type) {
	case store.WriteResult:
		return encodeWriteResult(r, known)
	case store.BranchResult:
		j.Branch = encodeInfo(r.Branch)
		if len(r.Messages) > 0 {
			j.System, err = encodeStored(r.Messages[0])
		}
	case store.DeleteResult:
		j.BranchID, j.Last = &r.BranchID, r.LastSequence
	default:
		return "", fmt.Errorf("rowjson: cannot remember a %T", result)
	}
	if err != nil {
		return "", err
	}
	out, err := json.Marshal(j)
	return string(out), err
}

// encodeWriteResult writes r as json.Marshal writes its resultJSON: the fields in order, the
// empty ones left out.
func encodeWriteResult(r store.WriteResult, known func(*envelope.Message) (string, bool)) (string, error) {
	b := append(make([]byte, 0, 64), '{')
	field := func(name string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), name...), `":`...)
	}
	var err error
	if r.Message.Message != nil {
		field("m")
		if b, err = appendStored(b, r.Message, known); err != nil {
			return "", err
		}
	}
	if r.Index != 0 {
		field("i")
		b = strconv.AppendInt(b, int64(r.Index), 10)
	}
	if r.Updated != nil && r.Updated.Message != nil {
		field("u")
		if b, err = appendStored(b, *r.Updated, known); err != nil {
			return "", err
		}
	}
	if r.Head != 0 {
		field("h")
		b = strconv.AppendUint(b, r.Head, 10)
	}
	return string(append(b, '}')), nil
}

// appendStored appends m as its storedJSON.
func appendStored(b []byte, m store.StoredMessage, known func(*envelope.Message) (string, bool)) ([]byte, error) {
	b = append(b, `{"m":`...)
	var (
		text string
		ok   bool
	)
	if known != nil {
		text, ok = known(m.Message)
	}
	if ok {
		b = append(b, text...)
	} else {
		raw, err := m.Message.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, raw...)
	}
	b = append(b, `,"s":`...)
	return append(strconv.AppendUint(b, m.Sequence, 10), '}'), nil
}

// DecodeResult reads a remembered result of op.
func (c Codec) DecodeResult(op store.Op, text string) (any, error) {
	var j resultJSON
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		return nil, c.BodyError(fmt.Errorf("a remembered result: %w", err))
	}
	switch op {
	case store.OpCreateBranch, store.OpImportBranch, store.OpForkBranch:
		if j.Branch == nil {
			return nil, c.BodyError(errors.New("a remembered branch result without its branch"))
		}
		info, err := j.Branch.decode()
		if err != nil {
			return nil, c.BodyError(fmt.Errorf("a remembered result's branch: %w", err))
		}
		res := store.BranchResult{Branch: info}
		if j.System != nil {
			sys, err := c.decodeStored(j.System)
			if err != nil {
				return nil, err
			}
			res.Messages = []store.StoredMessage{sys}
		}
		return res, nil
	case store.OpDeleteBranch:
		res := store.DeleteResult{LastSequence: j.Last}
		if j.BranchID != nil {
			res.BranchID = *j.BranchID
		}
		return res, nil
	}
	res := store.WriteResult{Index: j.Index, Head: j.Head}
	var err error
	if res.Message, err = c.decodeStored(j.Message); err != nil {
		return nil, err
	}
	if j.Updated != nil {
		u, err := c.decodeStored(j.Updated)
		if err != nil {
			return nil, err
		}
		res.Updated = &u
	}
	return res, nil
}
