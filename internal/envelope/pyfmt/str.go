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
	st := getState()
	defer putState(st)
	st.buf = appendRepr(st.buf, v)
	return string(st.buf)
}

func appendRepr(b []byte, v jsonv.Value) []byte {
	switch v.Kind() {
	case jsonv.Null:
		b = append(b, "None"...)
	case jsonv.Bool:
		if t, _ := v.Bool(); t {
			b = append(b, "True"...)
		} else {
			b = append(b, "False"...)
		}
	case jsonv.Number:
		b = append(b, pyNumberText(v)...)
	case jsonv.String:
		s, _ := v.Str()
		b = appendQuoted(b, s)
	case jsonv.Array:
		b = append(b, '[')
		for i, e := range v.Elems() {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendRepr(b, e)
		}
		b = append(b, ']')
	case jsonv.Object:
		b = append(b, '{')
		for i, m := range v.Members() {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendQuoted(b, m.Key)
			b = append(b, ": "...)
			b = appendRepr(b, m.Value)
		}
		b = append(b, '}')
	}
	return b
}

const lowerHex = "0123456789abcdef"

// appendQuoted appends repr(s) for a Python str. Bytes that are not valid
// UTF-8 are read as U+FFFD (see validUTF8).
func appendQuoted(b []byte, s string) []byte {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b = append(b, quote)
	start := 0 // s[start:i] is pending, to be copied as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != quote && c != '\\' {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case quote, '\\':
				b = append(b, '\\')
				b = append(b, c)
			case '\t':
				b = append(b, `\t`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			default: // other C0 controls and DEL
				b = append(b, `\x`...)
				b = append(b, lowerHex[c>>4])
				b = append(b, lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = utf8.AppendRune(b, utf8.RuneError) // printable
			i++
			start = i
			continue
		}
		if isPrintable(r) {
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch {
		case r <= 0xff:
			b = append(b, `\x`...)
			b = appendHex(b, r, 2)
		case r <= 0xffff:
			b = append(b, `\u`...)
			b = appendHex(b, r, 4)
		default:
			b = append(b, `\U`...)
			b = appendHex(b, r, 8)
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, quote)
}

// appendHex appends r as n lower-case hex digits.
func appendHex(b []byte, r rune, n int) []byte {
	for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
		b = append(b, lowerHex[(r>>uint(shift))&0xf])
	}
	return b
}
