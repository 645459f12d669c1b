package pyfmt

import (
	"unicode/utf8"
)

// isPrintable reports Python 3.11's str.isprintable() for one non-ASCII
// code point (ASCII is handled by the callers).
func isPrintable(r rune) bool {
	lo, hi := 0, len(printableRanges)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case r < printableRanges[m][0]:
			hi = m
		case r > printableRanges[m][1]:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// isPySpace reports Python's str.isspace() for one code point.
func isPySpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r') || (r >= 0x1c && r <= 0x1f)
	}
	for _, s := range spaceRunes {
		if r == s {
			return true
		}
	}
	return false
}

// isBlank reports whether s.strip() == "" in Python: s holds nothing but
// whitespace.
func isBlank(s string) bool {
	for _, r := range s {
		if !isPySpace(r) {
			return false
		}
	}
	return true
}

// validUTF8 returns s with every byte that is not part of valid UTF-8
// replaced by U+FFFD, as jsonv.AppendQuoted does. Values parsed by jsonv are
// always valid; only values built by hand can hold such bytes, and Python
// text cannot, so this keeps every output valid UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	buf := make([]byte, 0, len(s)+8)
	for _, r := range s {
		buf = utf8.AppendRune(buf, r) // an invalid byte decodes as U+FFFD
	}
	return string(buf)
}
