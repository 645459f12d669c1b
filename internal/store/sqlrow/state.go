package sqlrow

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// MessageReader reads one current message of a branch in an engine's
// transaction; ok is false when it is not a member.
type MessageReader interface {
	Message(branch, id uuid.UUID) (m *Message, ok bool, err error)
}

// State is a branch as the rules read it (store.BranchState) inside an
// engine's transaction that applies their plan: its row, and its messages
// read by id on demand (through the engine's MessageReader, once each)
// and kept for the rest of the write. An engine's write state embeds it
// and adds the statements that write a placement (apply, after Place).
type State struct {
	Row   *Branch
	Cache map[uuid.UUID]*Message // read or written by this write; nil entries are misses
	// Encoded holds messages' stored text encoded before the transaction
	// (Prebuilt.Plan).
	Encoded map[*envelope.Message]string
	read    MessageReader
}

var _ store.BranchState = (*State)(nil)

// NewState returns the state of row in a transaction whose messages read
// reads.
func NewState(row *Branch, read MessageReader) State {
	return State{Row: row, Cache: map[uuid.UUID]*Message{}, Encoded: map[*envelope.Message]string{}, read: read}
}

// BranchID is the branch's id (store.BranchState).
func (st *State) BranchID() uuid.UUID { return st.Row.ID }

// HeadSequence is the branch's head (store.BranchState).
func (st *State) HeadSequence() uint64 { return st.Row.Head }

// Lookup returns a current message's row, nil when it is no member.
func (st *State) Lookup(id uuid.UUID) (*Message, error) {
	if m, ok := st.Cache[id]; ok {
		return m, nil
	}
	m, _, err := st.read.Message(st.Row.ID, id)
	if err != nil {
		return nil, err
	}
	st.Cache[id] = m
	return m, nil
}

// Current returns a current message (store.BranchState).
func (st *State) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	m, err := st.Lookup(id)
	if err != nil || m == nil {
		return nil, false, err
	}
	return m.Msg, true, nil
}

// CurrentSystem returns the branch's system, nil when it has none
// (store.BranchState).
func (st *State) CurrentSystem() (*envelope.Message, error) {
	if st.Row.SystemID == nil {
		return nil, nil
	}
	m, err := st.Lookup(*st.Row.SystemID)
	if err != nil || m == nil {
		return nil, err
	}
	return m.Msg, nil
}

// Body returns the stored text of a message the write places: encoded
// before the transaction, or now.
func (st *State) Body(msg *envelope.Message) (string, error) {
	if body, ok := st.Encoded[msg]; ok {
		return body, nil
	}
	return EncodeMessage(msg)
}

// Stored returns the text this transaction stored m with, if it wrote m's
// row (the remembered result of a write may reuse it:
// rowjson.EncodeResultKnown).
func (st *State) Stored(m *envelope.Message) (string, bool) {
	if r := st.Cache[m.ID]; r != nil && r.Msg == m {
		return r.Body, true
	}
	return "", false
}

// Place places p at sequence seq on the branch (the function Place) and
// returns the message's new row, m, and the row it replaces, old (nil for
// none): m holds the stored text (Body), old is read (Lookup), and the row
// of the system p excludes is deleted first, by the engine's remove. The
// engine then writes m (over old).
func (st *State) Place(p store.Placement, seq uint64, remove func(id uuid.UUID) error) (m, old *Message, err error) {
	msg := p.Message
	body, err := st.Body(msg)
	if err != nil {
		return nil, nil, err
	}
	if p.Replaces {
		if old, err = st.Lookup(msg.ID); err != nil {
			return nil, nil, err
		}
	}
	if msg.Kind() == envelope.KindSystem && p.Excluded != nil {
		if err := remove(p.Excluded.ID); err != nil {
			return nil, nil, err
		}
	}
	m = &Message{Msg: msg, Body: body, Seq: seq}
	Place(st.Row, p, old, m)
	return m, old, nil
}
