package envelope

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// ParticipantKind says which of the four states of ADR-0006 D1 a sender or
// recipient is in.
type ParticipantKind uint8

// The participant states. The zero value is a role, and the zero Participant
// is MessageRole.UNSET, the constructor default.
const (
	// ParticipantRole is a MessageRole ("unset" when the field was absent).
	ParticipantRole ParticipantKind = iota
	// ParticipantNone is an explicit None (as recipient: broadcast).
	ParticipantNone
	// ParticipantID is a UUID.
	ParticipantID
	// ParticipantName is any other plain string, kept as given.
	ParticipantName
)

// Participant is a normalised sender or recipient (ADR-0006 D1). The zero
// value is MessageRole.UNSET.
type Participant struct {
	kind ParticipantKind
	id   uuid.UUID
	name string // ParticipantName: the name; ParticipantRole: the role ("" is unset)
}

// Unset returns MessageRole.UNSET, the default of an absent field.
func Unset() Participant { return Participant{kind: ParticipantRole, name: string(RoleUnset)} }

// None returns the explicit None participant (a broadcast recipient).
func None() Participant { return Participant{kind: ParticipantNone} }

// RoleParticipant returns a participant holding role r.
func RoleParticipant(r Role) Participant { return Participant{kind: ParticipantRole, name: string(r)} }

// IDParticipant returns a participant holding a UUID.
func IDParticipant(id uuid.UUID) Participant { return Participant{kind: ParticipantID, id: id} }

// ParseParticipant normalises a string as ADR-0006 D1 says: a role name
// (case-sensitive) becomes that role, UUID text (any form ParseID accepts)
// becomes a UUID, anything else, the empty string included, stays a plain
// string.
func ParseParticipant(s string) Participant {
	if r, ok := roleFromString(s); ok {
		return RoleParticipant(r)
	}
	if id, ok := ParseID(s); ok {
		return IDParticipant(id)
	}
	return Participant{kind: ParticipantName, name: s}
}

// participantFromJSON reads a sender or recipient from LionAGI JSON: null is
// the explicit None, a string is normalised; any other kind fails with
// LionAGI's "Invalid sender or recipient".
func participantFromJSON(field string, v jsonv.Value) (Participant, error) {
	switch v.Kind() {
	case jsonv.Null:
		return None(), nil
	case jsonv.String:
		s, _ := v.Str()
		return ParseParticipant(s), nil
	}
	return Participant{}, fieldErr(field, "Invalid sender or recipient: must be null or a string, got %s", v.Kind())
}

// Kind reports which state the participant is in.
func (p Participant) Kind() ParticipantKind { return p.kind }

// Role returns the role when Kind is ParticipantRole.
func (p Participant) Role() (Role, bool) {
	if p.kind != ParticipantRole {
		return "", false
	}
	if p.name == "" {
		return RoleUnset, true
	}
	return Role(p.name), true
}

// ID returns the UUID when Kind is ParticipantID.
func (p Participant) ID() (uuid.UUID, bool) { return p.id, p.kind == ParticipantID }

// IsNone reports whether the participant is the explicit None.
func (p Participant) IsNone() bool { return p.kind == ParticipantNone }

// String returns the text LionAGI's JSON writes for the participant (role
// names, canonical lowercase UUIDs, plain strings as given). It returns ""
// for None; use JSON to tell None from an empty name.
func (p Participant) String() string {
	switch p.kind {
	case ParticipantRole:
		r, _ := p.Role()
		return string(r)
	case ParticipantID:
		return p.id.String()
	case ParticipantName:
		return p.name
	}
	return ""
}

// JSON returns the participant as LionAGI JSON: null for None, else a
// string. Unlike LionAGI 0.27, an empty plain string stays "" (the vectors'
// "differs" record: 0.27 writes null there, turning a direct message into a
// broadcast on a round trip; historyd never changes routing).
func (p Participant) JSON() jsonv.Value {
	if p.kind == ParticipantNone {
		return jsonv.NullValue()
	}
	return jsonv.StringValue(p.String())
}

// Equal reports whether two participants are the same state and value.
func (p Participant) Equal(q Participant) bool {
	if p.kind != q.kind {
		return false
	}
	switch p.kind {
	case ParticipantRole:
		a, _ := p.Role()
		b, _ := q.Role()
		return a == b
	case ParticipantID:
		return p.id == q.id
	case ParticipantName:
		return p.name == q.name
	}
	return true
}

// truthy reports Python's bool() of the participant value, which
// Message.update uses to ignore falsy arguments (ADR-0006 D1).
func (p Participant) truthy() bool {
	switch p.kind {
	case ParticipantNone:
		return false
	case ParticipantName:
		return p.name != ""
	}
	return true
}
