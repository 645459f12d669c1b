package envelope

import (
	"strings"

	"github.com/google/uuid"
)

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
