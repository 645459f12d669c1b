package pyfmt

import (
	"strings"
	"unicode/utf8"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Str returns Python's str() of the value that json.loads would produce
// from v's JSON: a string is itself; an int its digits (any size; -0 is
// 0); a float its repr ("1.0", "1e+20", "inf"); true, false and null are
// True, False and None; lists and dicts are their repr, with ", " and
// ": " separators and keys in order, e.g. {'text': 'Hello!', 'n': None}.
func Str(v jsonv.Value) string {
	if s, ok := v.Str(); ok {
		return validUTF8(s)
	}
	return Repr(v)
}

// Repr returns Python's repr() of the value that json.loads would produce
// from v's JSON. Strings are quoted as Python 3.11 quotes them: in single
// quotes unless the text holds ' and no ", with \\, \t, \n, \r, \xNN,
// \uNNNN and \UNNNNNNNN escapes for the quote, the backslash and every
// character that str.isprintable() rejects (printable non-ASCII text is
// kept as it is).
func Repr(v jsonv.Value) string {
	var b strings.Builder
	b.Grow(reprSizeHint(v))
	appendRepr(&b, v)
	return b.String()
}

func reprSizeHint(v jsonv.Value) int {
	switch v.Kind() {
	case jsonv.String:
		s, _ := v.Str()
		return len(s) + 2
	case jsonv.Array, jsonv.Object:
		return 16 * v.Len()
	}
	return 8
}

func appendRepr(b *strings.Builder, v jsonv.Value) {
	switch v.Kind() {
	case jsonv.Null:
		b.WriteString("None")
	case jsonv.Bool:
		if t, _ := v.Bool(); t {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case jsonv.Number:
		b.WriteString(pyNumberText(v))
	case jsonv.String:
		s, _ := v.Str()
		appendQuoted(b, s)
	case jsonv.Array:
		b.WriteByte('[')
		for i, e := range v.Elems() {
			if i > 0 {
				b.WriteString(", ")
			}
			appendRepr(b, e)
		}
		b.WriteByte(']')
	case jsonv.Object:
		b.WriteByte('{')
		for i, m := range v.Members() {
			if i > 0 {
				b.WriteString(", ")
			}
			appendQuoted(b, m.Key)
			b.WriteString(": ")
			appendRepr(b, m.Value)
		}
		b.WriteByte('}')
	}
}

const lowerHex = "0123456789abcdef"

// appendQuoted writes repr(s) for a Python str. Bytes that are not valid
// UTF-8 are read as U+FFFD (see validUTF8).
func appendQuoted(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	start := 0 // s[start:i] is pending, to be copied as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != quote && c != '\\' {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b.WriteString(s[start:i])
			switch c {
			case quote, '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case '\t':
				b.WriteString(`\t`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			default: // other C0 controls and DEL
				b.WriteString(`\x`)
				b.WriteByte(lowerHex[c>>4])
				b.WriteByte(lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(s[start:i])
			b.WriteRune(utf8.RuneError) // printable
			i++
			start = i
			continue
		}
		if isPrintable(r) {
			i += size
			continue
		}
		b.WriteString(s[start:i])
		switch {
		case r <= 0xff:
			b.WriteString(`\x`)
			writeHex(b, r, 2)
		case r <= 0xffff:
			b.WriteString(`\u`)
			writeHex(b, r, 4)
		default:
			b.WriteString(`\U`)
			writeHex(b, r, 8)
		}
		i += size
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte(quote)
}

// writeHex writes r as n lower-case hex digits.
func writeHex(b *strings.Builder, r rune, n int) {
	for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
		b.WriteByte(lowerHex[(r>>uint(shift))&0xf])
	}
}
