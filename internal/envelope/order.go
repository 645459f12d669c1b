package envelope

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// LionAGIVersion and LionAGICommit name the LionAGI release whose behaviour
// this package reproduces (the vectors were recorded from it).
const (
	LionAGIVersion = "0.27.0"
	LionAGICommit  = "669ea9b5a47c6b9e780863243e215133ebef9b20"
)

// ValidateOrder reads a progression order as LionAGI's Progression
// validator does: null is empty; a list is flattened (nested lists too),
// null items skipped, every other item must be UUID text; an object gives
// its keys. Anything else is LionAGI's "Invalid item in order.".
func ValidateOrder(v jsonv.Value) ([]uuid.UUID, error) {
	switch v.Kind() {
	case jsonv.Null:
		return []uuid.UUID{}, nil
	case jsonv.Object:
		out := make([]uuid.UUID, 0, v.Len())
		for _, m := range v.Members() {
			id, ok := ParseID(m.Key)
			if !ok {
				return nil, fieldErr("order", "Invalid item in order.")
			}
			out = append(out, id)
		}
		return out, nil
	case jsonv.String:
		return ValidateOrder(jsonv.ArrayValue(v))
	case jsonv.Array:
		out := make([]uuid.UUID, 0, v.Len())
		return flattenOrder(v, out, 0)
	}
	return nil, fieldErr("order", "Invalid item in order.")
}

func flattenOrder(list jsonv.Value, out []uuid.UUID, depth int) ([]uuid.UUID, error) {
	if depth > jsonv.MaxDepth {
		return nil, fieldErr("order", "Invalid item in order.")
	}
	for _, e := range list.Elems() {
		switch e.Kind() {
		case jsonv.Null:
			continue
		case jsonv.Array:
			var err error
			if out, err = flattenOrder(e, out, depth+1); err != nil {
				return nil, err
			}
		case jsonv.String:
			s, _ := e.Str()
			id, ok := ParseID(s)
			if !ok {
				return nil, fieldErr("order", "Invalid item in order.")
			}
			out = append(out, id)
		default:
			return nil, fieldErr("order", "Invalid item in order.")
		}
	}
	return out, nil
}

// NormalizeParticipant is LionAGI's validate_sender_recipient for a JSON
// value: null becomes MessageRole.UNSET (unlike a message field, where an
// explicit null stays None), a string is normalised by ParseParticipant, and
// any other value is "Invalid sender or recipient".
func NormalizeParticipant(v jsonv.Value) (Participant, error) {
	if v.IsNull() {
		return Unset(), nil
	}
	if s, ok := v.Str(); ok {
		return ParseParticipant(s), nil
	}
	return Participant{}, fieldErr("", "Invalid sender or recipient")
}
