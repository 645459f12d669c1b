package server

import "fmt"

// LimitError is the error Limits.Validate returns: the field it refused, the field's value and the
// rule the value breaks. It wraps ErrInvalidLimits.
//
// A program that fills Limits from settings of its own reports the refusal in its settings' names
// with Describe; cmd/historyd maps Field to its flag, so that its usage line names what to change.
type LimitError struct {
	// Field is the Go name of the field refused, such as "KeepaliveTime". It names the field, not
	// a setting, and changes only when the field is renamed.
	Field string
	// Value is the field's value (for MaxRenderedBytes and MaxResponseBytes, the default in place
	// of a zero, as the server would use it).
	Value any
	// Rule is the rule Value breaks.
	Rule LimitRule
	// Want is the value the message offers with the rule: the field's default for LimitPositive,
	// its maximum for LimitAtMost, its zero for LimitNotNegative and LimitNotNegativeDefault.
	Want any
	// Other and OtherValue, for a rule between two fields (LimitBelowOther, LimitAboveOther), are
	// the Go name and the value of the field Field was held against; "" and nil otherwise.
	Other      string
	OtherValue any
}

// LimitRule is a rule of Limits.Validate: what a LimitError's Value breaks.
type LimitRule int

// The rules of Limits.Validate.
const (
	// LimitPositive: the field must be above zero.
	LimitPositive LimitRule = iota + 1
	// LimitNotNegative: the field must be zero or more; zero means none (no limit).
	LimitNotNegative
	// LimitNotNegativeDefault: the field must be zero or more; zero means the default.
	LimitNotNegativeDefault
	// LimitBelowOther: the field is below Other, and must be at least Other. MaxInflightBytes
	// against MaxRecvMsgSize: every call reserves MaxRecvMsgSize of the budget.
	LimitBelowOther
	// LimitAboveOther: the field is above Other, and must be at most Other. MaxRenderedBytes
	// against MaxResponseBytes: a rendering is sent within the response budget.
	LimitAboveOther
	// LimitAtMost: the field, a count the server allocates whole, up front, must be from zero to
	// Want (StreamWorkers, MaxAppendWindow).
	LimitAtMost
)

// Error says what Validate refused, naming the field by its Go name.
func (e *LimitError) Error() string {
	return ErrInvalidLimits.Error() + ": " + e.Describe(func(field string) string { return field })
}

// Unwrap returns ErrInvalidLimits, so that errors.Is(err, ErrInvalidLimits) holds.
func (e *LimitError) Unwrap() error { return ErrInvalidLimits }

// Describe says what is wrong in one line that leads with the field and its value, naming each
// field (Field, and Other) as name says: given the field's Go name, it returns what the reader
// knows the field by, such as a flag.
func (e *LimitError) Describe(name func(field string) string) string {
	switch e.Rule {
	case LimitPositive:
		return fmt.Sprintf("%s %v: must be positive, such as %v", name(e.Field), e.Value, e.Want)
	case LimitNotNegative:
		return fmt.Sprintf("%s %v: must not be negative (%v: none)", name(e.Field), e.Value, e.Want)
	case LimitNotNegativeDefault:
		return fmt.Sprintf("%s %v: must not be negative (%v: the server's default)", name(e.Field), e.Value, e.Want)
	case LimitBelowOther:
		return fmt.Sprintf("%s %v is below %s %v: every call reserves %s of it, so none could start",
			name(e.Field), e.Value, name(e.Other), e.OtherValue, name(e.Other))
	case LimitAboveOther:
		return fmt.Sprintf("%s %v is above %s %v: a rendering that large could never be sent",
			name(e.Field), e.Value, name(e.Other), e.OtherValue)
	case LimitAtMost:
		return fmt.Sprintf("%s %v: want 0 to %v (it is allocated whole, up front)", name(e.Field), e.Value, e.Want)
	}
	return fmt.Sprintf("%s %v: out of range", name(e.Field), e.Value)
}
