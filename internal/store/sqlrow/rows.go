package sqlrow

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/rowjson"
)

// Branch is one row of branches (migrations/*/00001_initial.sql).
type Branch struct {
	ID, Incarnation uuid.UUID
	CreatedAt       float64
	Metadata        jsonv.Value
	Name, User      *string
	Parent, Fork    *uuid.UUID
	Pile, Prog      store.ElementID
	Head            uint64
	Epoch, SelEpoch uint64
	Selected        *store.Progression
	SystemID        *uuid.UUID
	NextPos         int64
	NextRank        int64
	Count           int
}

// Info describes the branch.
func (b *Branch) Info() store.BranchInfo {
	return store.BranchInfo{
		ID: b.ID, Incarnation: b.Incarnation, CreatedAt: b.CreatedAt, Metadata: b.Metadata,
		Name: b.Name, User: b.User, ParentBranchID: b.Parent, ForkPoint: b.Fork,
		HeadSequence: b.Head, MessageCount: b.Count, SystemID: b.SystemID, Selected: b.Selected != nil,
	}
}

// HasSystem reports whether index 0 holds a system.
func (b *Branch) HasSystem() bool { return b.SystemID != nil }

// Index returns a message's position in the full order.
func (b *Branch) Index(pos int64) int {
	if pos < 0 {
		return 0
	}
	if b.HasSystem() {
		return int(pos) + 1
	}
	return int(pos)
}

// DecodeJSON sets the row's JSON columns from their text: metadata, and
// the selected progression (nil: NULL). Its error joins every column's
// that does not decode, for the engine to word as a damaged row.
func (b *Branch) DecodeJSON(meta string, selected *string) error {
	var (
		errs []error
		err  error
	)
	b.Metadata, err = jsonv.ParseDepth([]byte(meta), rowjson.Depth)
	errs = append(errs, err)
	if selected != nil {
		v, err := jsonv.ParseDepth([]byte(*selected), rowjson.Depth)
		errs = append(errs, err)
		if err == nil {
			b.Selected, err = store.ParseProgression(v)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// EncodeSelected writes the selected progression's column.
func EncodeSelected(p *store.Progression) any {
	if p == nil {
		return nil
	}
	return string(jsonv.Marshal(p.Encode(envelope.ModeJSON, "")))
}

// Message is one row of messages: a current message of a branch.
type Message struct {
	Msg  *envelope.Message
	Body string // Msg as stored
	Pos  int64  // -1 for the system
	Rank int64
	Seq  uint64
}

// Stored is the message with the sequence that wrote it.
func (m *Message) Stored() store.StoredMessage {
	return store.StoredMessage{Message: m.Msg, Sequence: m.Seq}
}

// EncodeMessage writes a message as its stored text: to_dict(mode='json').
func EncodeMessage(m *envelope.Message) (string, error) {
	b, err := m.MarshalJSON()
	return string(b), err
}

// DecodeMessage reads a message's stored text. Its error says so and wraps
// what failed, for the engine to word as a damaged row.
func DecodeMessage(body string) (*envelope.Message, error) {
	v, err := jsonv.ParseDepth([]byte(body), rowjson.Depth)
	if err != nil {
		return nil, fmt.Errorf("a stored message: %w", err)
	}
	m, err := envelope.Decode(v)
	if err != nil {
		return nil, fmt.Errorf("a stored message: %w", err)
	}
	return m, nil
}

// Collect gathers the messages each hands over, in order: an engine's row
// loop (its eachMsg) made a slice.
func Collect(each func(yield func(*Message) error) error) ([]*Message, error) {
	var out []*Message
	if err := each(func(m *Message) error {
		out = append(out, m)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}
