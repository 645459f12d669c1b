package envelope

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// ErrNilID is the nil UUID (00000000-0000-0000-0000-000000000000) given
// as the id of something (issue 11 case 8): it names nothing, and taken
// as "none" it would silently become a random id on create. It wraps
// ErrInvalid.
var ErrNilID = fmt.Errorf("%w: the nil UUID 00000000-0000-0000-0000-000000000000 is not an id", ErrInvalid)

// ParseElementID reads the id of something (a branch, a message, an
// owner, a target, an element of LionAGI JSON) as ParseID does, and
// refuses the nil UUID with ErrNilID; ok is false when s is not a UUID.
// Every such id goes through it, so the nil UUID is refused in one place;
// participants (sender, recipient) and progression items are references
// read with ParseID.
func ParseElementID(s string) (id uuid.UUID, ok bool, err error) {
	id, ok = ParseID(s)
	if ok && id == uuid.Nil {
		return uuid.UUID{}, true, ErrNilID
	}
	return id, ok, nil
}

// ParseID reads a UUID the way Python's uuid.UUID(str) does (ADR-0001 D1:
// "id accepts a UUID or a string accepted by UUID(str(value))"): an optional
// "urn:" and "uuid:" prefix, optional surrounding braces, hyphens anywhere,
// then exactly 32 hex digits in either case. The result is written canonical
// lowercase by String.
func ParseID(s string) (uuid.UUID, bool) {
	// Python: hex.replace('urn:', '').replace('uuid:', '').strip('{}').replace('-', '')
	if strings.Contains(s, "urn:") {
		s = strings.ReplaceAll(s, "urn:", "")
	}
	if strings.Contains(s, "uuid:") {
		s = strings.ReplaceAll(s, "uuid:", "")
	}
	s = strings.Trim(s, "{}")
	var hex [32]byte
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' {
			continue
		}
		if n == 32 || !isHex(c) {
			return uuid.UUID{}, false
		}
		hex[n] = c
		n++
	}
	if n != 32 {
		return uuid.UUID{}, false
	}
	var id uuid.UUID
	for i := 0; i < 16; i++ {
		id[i] = unhex(hex[2*i])<<4 | unhex(hex[2*i+1])
	}
	return id, true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
