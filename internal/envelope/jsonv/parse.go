package jsonv

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds nesting so that a hostile document cannot exhaust the
// stack. Python's json module stops near 1,000 levels (its recursion limit);
// historyd accepts no less than that.
const MaxDepth = 1000

// SyntaxError reports where and why JSON text failed to parse.
type SyntaxError struct {
	Offset int    // byte offset of the problem
	Msg    string // what was wrong
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// ErrEmpty is returned by Parse for input holding no value.
var ErrEmpty = errors.New("invalid JSON: empty input")

// Parse reads one JSON document. It keeps object key order and number
// literals, rejects invalid UTF-8 and trailing data, and treats a repeated
// key as Python's json module does: the last value wins, at the position of
// the first occurrence.
func Parse(data []byte) (Value, error) { return ParseDepth(data, MaxDepth) }

// ParseDepth is Parse with another nesting bound: ImportBranch reads a whole
// export, whose values sit a few levels below its top (issue 13 item 7).
func ParseDepth(data []byte, maxDepth int) (Value, error) {
	p := parser{data: data, maxDepth: maxDepth}
	p.skipSpace()
	if p.pos >= len(p.data) {
		return Value{}, ErrEmpty
	}
	v, err := p.value(0)
	if err != nil {
		return Value{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return Value{}, p.errf("unexpected data after the value")
	}
	return v, nil
}

// ParseString is Parse for a string.
func ParseString(s string) (Value, error) { return Parse([]byte(s)) }

type parser struct {
	data     []byte
	pos      int
	maxDepth int
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (Value, error) {
	if depth > p.maxDepth {
		return Value{}, p.errf("nesting deeper than %d levels", p.maxDepth)
	}
	if p.pos >= len(p.data) {
		return Value{}, p.errf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return Value{}, err
		}
		return StringValue(s), nil
	case c == 't':
		return p.literal("true", Value{kind: Bool, n: 1})
	case c == 'f':
		return p.literal("false", Value{kind: Bool})
	case c == 'n':
		return p.literal("null", Value{})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return Value{}, p.errf("unexpected character %q", c)
	}
}

func (p *parser) literal(word string, v Value) (Value, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return Value{}, p.errf("invalid literal")
	}
	p.pos += len(word)
	return v, nil
}

func (p *parser) number() (Value, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return Value{}, p.errf("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return Value{}, p.errf("invalid number: no digits after the decimal point")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return Value{}, p.errf("invalid number: no digits in the exponent")
		}
	}
	return text(Number, string(p.data[start:p.pos])), nil
}

func (p *parser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			if !utf8.Valid(s) {
				return "", p.errf("invalid UTF-8 in string")
			}
			p.pos++
			return string(s), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errf("control character in string")
		}
		p.pos++
	}
	buf := make([]byte, 0, p.pos-start+16)
	buf = append(buf, p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", p.errf("invalid UTF-8 in string")
			}
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			break
		}
		esc := p.data[p.pos]
		p.pos++
		switch esc {
		case '"', '\\', '/':
			buf = append(buf, esc)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					p.pos += 2
					if r2, err = p.hex4(); err != nil {
						return "", err
					}
				}
				dec := utf16.DecodeRune(r, r2)
				if dec == utf8.RuneError {
					// A lone surrogate cannot be stored as UTF-8 text.
					return "", p.errf("unpaired UTF-16 surrogate in string")
				}
				r = dec
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errf("invalid escape \\%c", esc)
		}
	}
	return "", p.errf("unterminated string")
}

func (p *parser) hex4() (rune, error) {
	if len(p.data)-p.pos < 4 {
		return 0, p.errf("short \\u escape")
	}
	n, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, p.errf("invalid \\u escape")
	}
	p.pos += 4
	return rune(n), nil
}

func (p *parser) array(depth int) (Value, error) {
	p.pos++ // [
	elems := []Value{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return ArrayValue(elems...), nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		elems = append(elems, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.errf("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return ArrayValue(elems...), nil
		default:
			return Value{}, p.errf("expected ',' or ']' in array")
		}
	}
}

// indexThreshold is the member count past which duplicate-key detection
// switches from a linear scan to a map: small objects (the common case)
// stay allocation-free, big ones stay linear-time.
const indexThreshold = 16

func (p *parser) object(depth int) (Value, error) {
	p.pos++ // {
	members := []Member{}
	var index map[string]int
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return ObjectValue(members...), nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return Value{}, p.errf("expected a string key in object")
		}
		key, err := p.str()
		if err != nil {
			return Value{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return Value{}, p.errf("expected ':' after object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return Value{}, err
		}
		dup := -1
		if index != nil {
			if i, ok := index[key]; ok {
				dup = i
			}
		} else {
			for i := range members {
				if members[i].Key == key {
					dup = i
					break
				}
			}
		}
		if dup >= 0 {
			members[dup].Value = v
		} else {
			members = append(members, Member{Key: key, Value: v})
			if index != nil {
				index[key] = len(members) - 1
			} else if len(members) > indexThreshold {
				index = make(map[string]int, len(members)*2)
				for i, m := range members {
					index[m.Key] = i
				}
			}
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.errf("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return ObjectValue(members...), nil
		default:
			return Value{}, p.errf("expected ',' or '}' in object")
		}
	}
}

func validNumber(s string) bool {
	p := parser{data: []byte(s)}
	if len(s) == 0 {
		return false
	}
	c := s[0]
	if c != '-' && (c < '0' || c > '9') {
		return false
	}
	_, err := p.number()
	return err == nil && p.pos == len(s)
}
