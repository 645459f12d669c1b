package envelope

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Every error the package returns for bad input wraps one
// of these (test with errors.Is) and, where a field is to blame, is a
// *FieldError naming it (errors.As).
var (
	// ErrInvalid is the root of every input-validation error: the value a
	// client sent cannot be a LionAGI message. internal/server maps it to
	// INVALID_ARGUMENT.
	ErrInvalid = errors.New("invalid input")

	// ErrUnknownClass is returned when a lion_class discriminator names no
	// class of the closed registry (docs/design.md#lion-class: nothing is ever loaded or
	// guessed). It wraps ErrInvalid.
	ErrUnknownClass = fmt.Errorf("%w: unknown lion_class", ErrInvalid)

	// ErrClassMismatch is returned when a constructor is given metadata whose
	// lion_class names another class (ADR-0001 D1, "Metadata class
	// mismatch."). It wraps ErrInvalid.
	ErrClassMismatch = fmt.Errorf("%w: metadata class mismatch", ErrInvalid)

	// ErrUnsupportedMode is returned for an encode mode other than python,
	// json or db (ADR-0001 D2). It wraps ErrInvalid.
	ErrUnsupportedMode = fmt.Errorf("%w: unsupported mode", ErrInvalid)

	// ErrRender is returned when a message cannot be rendered (a rejected
	// image URL, a non-text system message): LionAGI's chat_msg becomes None
	// in that case (ADR-0006 D1), and historyd reports why.
	ErrRender = errors.New("render failed")
)

// FieldError is an input-validation error that names the offending field
// with a dotted path ("content.arguments", "metadata", "sender").
type FieldError struct {
	Field string // dotted path of the field, as the client named it
	Msg   string // what is wrong, in words
	Err   error  // the sentinel (or underlying) error; defaults to ErrInvalid
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Unwrap returns the sentinel the error belongs to.
func (e *FieldError) Unwrap() error {
	if e.Err == nil {
		return ErrInvalid
	}
	return e.Err
}

// fieldErr builds a *FieldError wrapping ErrInvalid.
func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// withPrefix prefixes the field of a *FieldError (so a content error reads
// "content.arguments"); other errors are returned unchanged.
func withPrefix(prefix string, err error) error {
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	cp := *fe
	switch {
	case cp.Field == "":
		cp.Field = prefix
	case cp.Field[0] == '[':
		cp.Field = prefix + cp.Field
	default:
		cp.Field = prefix + "." + cp.Field
	}
	return &cp
}

// withIndex appends a list index to a *FieldError's field ("images[2]").
func withIndex(i int, err error) error {
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	cp := *fe
	cp.Field += "[" + strconv.Itoa(i) + "]"
	return &cp
}

// InvalidField returns the path of the rejected field; internal/server
// uses it to fill google.rpc.BadRequest.
func (e *FieldError) InvalidField() string { return e.Field }
