package jsonv

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// AppendJSON appends the compact JSON text of v to buf. Strings are written
// as UTF-8 with only the escapes JSON requires (as orjson, LionAGI's
// encoder, writes them); numbers are written as their literal.
func AppendJSON(buf []byte, v Value) []byte {
	switch v.kind {
	case Null:
		return append(buf, "null"...)
	case Bool:
		if v.n != 0 {
			return append(buf, "true"...)
		}
		return append(buf, "false"...)
	case Number:
		return append(buf, v.text()...)
	case String:
		return AppendQuoted(buf, v.text())
	case Array:
		buf = append(buf, '[')
		for i, e := range v.arr() {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = AppendJSON(buf, e)
		}
		return append(buf, ']')
	case Object:
		buf = append(buf, '{')
		for i, m := range v.obj() {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = AppendQuoted(buf, m.Key)
			buf = append(buf, ':')
			buf = AppendJSON(buf, m.Value)
		}
		return append(buf, '}')
	}
	return buf
}

// Marshal returns the compact JSON text of v.
func Marshal(v Value) []byte { return AppendJSON(nil, v) }

// String returns the compact JSON text of v (handy in tests and errors).
func (v Value) String() string { return string(AppendJSON(nil, v)) }

const hexDigits = "0123456789abcdef"

// AppendQuoted appends s as a JSON string literal. Invalid UTF-8 becomes
// U+FFFD, so the output is always valid JSON.
func AppendQuoted(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// FormatFloatOrjson writes a float as orjson 3.8 (LionAGI's JSON encoder, through
// the Rust ryu crate) does: the shortest round-tripping digits, positional between 1e-5 and
// 1e16, scientific outside ("1e20", "1.5e-7"); infinities, which JSON
// cannot hold, become null as orjson writes them.
func FormatFloatOrjson(f float64) string {
	if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
		return "null"
	}
	if f == 0 {
		if 1/f < 0 {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	neg := strings.HasPrefix(e, "-")
	e = strings.TrimPrefix(e, "-")
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	length := len(digits)
	kk := exp + 1 // 10^(kk-1) <= |f| < 10^kk
	k := kk - length
	var out strings.Builder
	if neg {
		out.WriteByte('-')
	}
	switch {
	case 0 <= k && kk <= 16:
		out.WriteString(digits)
		out.WriteString(strings.Repeat("0", k))
		out.WriteString(".0")
	case 0 < kk && kk <= 16:
		out.WriteString(digits[:kk])
		out.WriteByte('.')
		out.WriteString(digits[kk:])
	case -5 < kk && kk <= 0:
		out.WriteString("0.")
		out.WriteString(strings.Repeat("0", -kk))
		out.WriteString(digits)
	case length == 1:
		out.WriteString(digits)
		out.WriteByte('e')
		out.WriteString(strconv.Itoa(kk - 1))
	default:
		out.WriteString(digits[:1])
		out.WriteByte('.')
		out.WriteString(digits[1:])
		out.WriteByte('e')
		out.WriteString(strconv.Itoa(kk - 1))
	}
	return out.String()
}

// FormatFloat writes f as Python's repr(float) does: the shortest text that
// reads back as f, always with a decimal point or an exponent ("1.0",
// "0.1", "1e+16", "2.5e-05"). Python switches to exponent form when the
// decimal exponent is below -4 or at least 16.
func FormatFloat(f float64) string {
	if f == 0 {
		if 1/f < 0 {
			return "-0.0"
		}
		return "0.0"
	}
	// 'e' with -1 precision gives the shortest round-tripping digits.
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.2345e+06"
	neg := strings.HasPrefix(e, "-")
	if neg {
		e = e[1:]
	}
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)

	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if exp < -4 || exp >= 16 {
		b.WriteByte(digits[0])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if exp < 0 {
			b.WriteByte('-')
			exp = -exp
		} else {
			b.WriteByte('+')
		}
		if exp < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.Itoa(exp))
		return b.String()
	}
	if exp < 0 {
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -exp-1))
		b.WriteString(digits)
		return b.String()
	}
	intLen := exp + 1
	if len(digits) <= intLen {
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", intLen-len(digits)))
		b.WriteString(".0")
		return b.String()
	}
	b.WriteString(digits[:intLen])
	b.WriteByte('.')
	b.WriteString(digits[intLen:])
	return b.String()
}

// EncodedLen is len(Marshal(v)) without building the text: containers add
// their punctuation, leaves are encoded one at a time into a scratch buffer
// (so the memory it takes is that of the largest string, not of the whole
// text). Used to refuse a response that would be too large before it is
// built (issue 11).
func EncodedLen(v Value) int {
	var scratch []byte
	return encodedLen(v, &scratch)
}

func encodedLen(v Value, scratch *[]byte) int {
	switch v.kind {
	case Array:
		n := 2 + max(len(v.arr())-1, 0) // [ ] and the commas
		for _, e := range v.arr() {
			n += encodedLen(e, scratch)
		}
		return n
	case Object:
		n := 2 + max(len(v.obj())-1, 0)
		for _, m := range v.obj() {
			*scratch = AppendQuoted((*scratch)[:0], m.Key)
			n += len(*scratch) + 1 // the key and ':'
			n += encodedLen(m.Value, scratch)
		}
		return n
	}
	*scratch = AppendJSON((*scratch)[:0], v)
	return len(*scratch)
}
