package envelope

import "strings"

// CheckNoNUL refuses a text holding U+0000 (NUL), naming field. It guards the texts historyd keeps
// outside a message's JSON, in text columns of its own (request ids, a branch's name and user, an
// Exchange message's recipient and channel): PostgreSQL's TEXT cannot hold NUL, so without the
// check memory and sqlite would store what postgres fails on, and one client's value would answer
// differently by engine (docs/decisions/0012 row 24). Texts inside a message's JSON (its content,
// sender, recipient and channel in a branch) are stored as JSON, NUL escaped, and need no check.
func CheckNoNUL(field, s string) error {
	if strings.IndexByte(s, 0) < 0 {
		return nil
	}
	return &FieldError{Field: field, Msg: "must not contain U+0000 (NUL)", Err: ErrInvalid}
}
