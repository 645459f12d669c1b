package pyfmt

import (
	"strings"
	"unicode/utf8"
)

// scalarAnalysis is PyYAML's ScalarAnalysis for a string, less the flow
// fields this dumper never needs (it writes no scalar inside a flow
// collection) and plus the length in code points.
type scalarAnalysis struct {
	runes           int
	empty           bool
	multiline       bool
	allowBlockPlain bool
	allowSingle     bool
	allowBlock      bool
}

// isYAMLBreak reports the characters PyYAML treats as line breaks.
func isYAMLBreak(r rune) bool {
	return r == '\n' || r == 0x85 || r == 0x2028 || r == 0x2029
}

// isYAMLBlankOrBreak is PyYAML's '\0 \t\r\n\x85\u2028\u2029' set, the
// characters that "precede" or "follow" an indicator harmlessly.
func isYAMLBlankOrBreak(r rune) bool {
	switch r {
	case 0, ' ', '\t', '\r', '\n', 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// asciiInert marks the ASCII characters that change nothing in
// analyze_scalar wherever they stand: not an indicator, a space, a break
// or a control character.
var asciiInert = func() (t [utf8.RuneSelf]bool) {
	for c := 0x21; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range "#,[]{}&*!|>'\"%@`?:-" {
		t[c] = false
	}
	return t
}()

// followedByBlank reports whether the character at byte i of s is absent
// or one of PyYAML's '\0 \t\r\n\x85\u2028\u2029', without decoding it.
func followedByBlank(s string, i int) bool {
	if i >= len(s) {
		return true
	}
	switch s[i] {
	case 0, ' ', '\t', '\r', '\n':
		return true
	case 0xc2: // U+0085
		return i+1 < len(s) && s[i+1] == 0x85
	case 0xe2: // U+2028, U+2029
		return i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9)
	}
	return false
}

// analyze restates Emitter.analyze_scalar with allow_unicode=True. Inert
// ASCII characters, the bulk of any text, take a fast path.
func analyze(s string) scalarAnalysis {
	if s == "" {
		return scalarAnalysis{empty: true, allowBlockPlain: true, allowSingle: true}
	}
	var (
		blockIndicators, lineBreaks, special                     bool
		leadingSpace, leadingBreak, trailingSpace, trailingBreak bool
		breakSpace, spaceBreak                                   bool
		previousSpace, previousBreak                             bool
	)
	if strings.HasPrefix(s, "---") || strings.HasPrefix(s, "...") {
		blockIndicators = true
	}
	precededByBlank := true // the previous character is blank, or there is none
	index := 0
	for pos := 0; pos < len(s); index++ {
		c := s[pos]
		if c < utf8.RuneSelf && asciiInert[c] {
			previousSpace, previousBreak, precededByBlank = false, false, false
			pos++
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[pos:])
		}
		pos += size
		last := pos >= len(s)

		switch r {
		case '#':
			if index == 0 || precededByBlank {
				blockIndicators = true
			}
		case ',', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
			if index == 0 { // inside the text they matter only to flow style
				blockIndicators = true
			}
		case '?':
			if index == 0 && followedByBlank(s, pos) {
				blockIndicators = true
			}
		case ':':
			if followedByBlank(s, pos) {
				blockIndicators = true
			}
		case '-':
			if index == 0 && followedByBlank(s, pos) {
				blockIndicators = true
			}
		}

		isBreak := isYAMLBreak(r)
		if isBreak {
			lineBreaks = true
		}
		if r != '\n' && (r < 0x20 || r > 0x7e) {
			unicodeOK := r == 0x85 || (r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) ||
				(r >= 0x10000 && r < 0x10ffff)
			if !unicodeOK || r == 0xfeff {
				special = true
			}
		}

		switch {
		case r == ' ':
			if index == 0 {
				leadingSpace = true
			}
			if last {
				trailingSpace = true
			}
			if previousBreak {
				breakSpace = true
			}
			previousSpace, previousBreak = true, false
		case isBreak:
			if index == 0 {
				leadingBreak = true
			}
			if last {
				trailingBreak = true
			}
			if previousSpace {
				spaceBreak = true
			}
			previousSpace, previousBreak = false, true
		default:
			previousSpace, previousBreak = false, false
		}
		precededByBlank = isYAMLBlankOrBreak(r)
	}

	a := scalarAnalysis{runes: index, multiline: lineBreaks, allowBlockPlain: true, allowSingle: true, allowBlock: true}
	if leadingSpace || leadingBreak || trailingSpace || trailingBreak {
		a.allowBlockPlain = false
	}
	if trailingSpace {
		a.allowBlock = false
	}
	if breakSpace {
		a.allowBlockPlain, a.allowSingle = false, false
	}
	if spaceBreak || special {
		a.allowBlockPlain, a.allowSingle, a.allowBlock = false, false, false
	}
	if lineBreaks || blockIndicators {
		a.allowBlockPlain = false
	}
	return a
}

// simpleKey restates Emitter.check_simple_key for a string key. The
// length counts the "!!str" tag the emitter prepares (and then drops), so
// a key of 123 code points or more already takes the "? key" form.
func (a scalarAnalysis) simpleKey() bool {
	const strTagLen = len("!!str")
	return a.runes+strTagLen < 128 && !a.empty && !a.multiline
}

// Scalar styles, as PyYAML names them.
const (
	stylePlain   = 0
	styleSingle  = '\''
	styleDouble  = '"'
	styleLiteral = '|'
)

// stringScalar writes a string: LionAGI's representer asks for the literal
// block style when the text holds "\n" and for no style otherwise; the
// emitter's choose_scalar_style then settles it.
func (e *emitter) stringScalar(s string, a scalarAnalysis, ctx nodeContext) {
	e.increaseIndent(true, false)
	simpleKey := ctx&ctxSimpleKey != 0
	var style byte
	switch {
	case strings.IndexByte(s, '\n') >= 0:
		// A literal block where allowed; otherwise, as the requested
		// style is neither plain nor single-quoted, double-quoted.
		if !simpleKey && a.allowBlock {
			style = styleLiteral
		} else {
			style = styleDouble
		}
	case !(simpleKey && (a.empty || a.multiline)) && a.allowBlockPlain && !resolvesAsNonString(s):
		style = stylePlain
	case a.allowSingle && !(simpleKey && a.multiline):
		style = styleSingle
	default:
		style = styleDouble
	}
	switch style {
	case stylePlain:
		e.writePlain(s, a.runes, ctx)
	case styleSingle:
		e.writeSingleQuoted(s)
	case styleDouble:
		e.writeDoubleQuoted(s)
	default:
		e.writeLiteral(s)
	}
	e.popIndent()
}

// plainScalar writes a null, bool or number, whose text always resolves
// to its own type and needs no quoting.
func (e *emitter) plainScalar(text string, ctx nodeContext) {
	e.increaseIndent(true, false)
	e.writePlain(text, len(text), ctx)
	e.popIndent()
}

func (e *emitter) writePlain(s string, runes int, ctx nodeContext) {
	if ctx&ctxRoot != 0 {
		e.openEnded = true
	}
	if s == "" || !e.room(len(s)+b2i(!e.whitespace)) {
		return
	}
	if !e.whitespace {
		e.buf = append(e.buf, ' ')
		e.column++
	}
	e.whitespace = false
	e.indention = false
	e.buf = append(e.buf, s...)
	e.column += runes
}

func (e *emitter) writeText(s string) {
	if !e.room(len(s)) {
		return
	}
	e.buf = append(e.buf, s...)
	e.column += utf8.RuneCountInString(s)
}

// writeSingleQuoted restates Emitter.write_single_quoted without folding:
// quotes doubled, line breaks (NEL, LS, PS here; "\n" never reaches this
// style) written as they are, each run followed by the indentation.
func (e *emitter) writeSingleQuoted(s string) {
	e.writeIndicator("'", true, false, false)
	spaces, breaks := false, false
	start := 0
	for end := 0; end <= len(s); {
		var ch rune = -1
		size := 0
		if end < len(s) {
			ch, size = utf8.DecodeRuneInString(s[end:])
		}
		switch {
		case spaces:
			if ch != ' ' {
				e.writeText(s[start:end])
				start = end
			}
		case breaks:
			if ch < 0 || !isYAMLBreak(ch) {
				if s[start] == '\n' {
					e.writeLineBreak("\n")
				}
				e.writeBreaks(s[start:end])
				e.writeIndent()
				if e.over() {
					return
				}
				start = end
			}
		default:
			if ch < 0 || ch == ' ' || ch == '\'' || isYAMLBreak(ch) {
				if start < end {
					e.writeText(s[start:end])
					start = end
				}
			}
		}
		if ch == '\'' && e.room(2) {
			e.buf = append(e.buf, "''"...)
			e.column += 2
			start = end + 1
		}
		if ch >= 0 {
			spaces = ch == ' '
			breaks = isYAMLBreak(ch)
		}
		if size == 0 {
			break
		}
		end += size
	}
	e.writeIndicator("'", false, false, false)
}

const upperHex = "0123456789ABCDEF"

// writeDoubleQuoted restates Emitter.write_double_quoted without folding.
func (e *emitter) writeDoubleQuoted(s string) {
	e.writeIndicator(`"`, true, false, false)
	start := 0
	for end := 0; end < len(s); {
		c := s[end]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			end++
			continue
		}
		ch, size := utf8.DecodeRuneInString(s[end:])
		if ch > 0x7e && ch != 0x85 && ch != 0x2028 && ch != 0x2029 && ch != 0xfeff &&
			((ch >= 0xa0 && ch <= 0xd7ff) || (ch >= 0xe000 && ch <= 0xfffd)) {
			end += size
			continue
		}
		e.writeText(s[start:end])
		var esc string
		switch ch {
		case 0:
			esc = `\0`
		case 0x07:
			esc = `\a`
		case 0x08:
			esc = `\b`
		case 0x09:
			esc = `\t`
		case 0x0a:
			esc = `\n`
		case 0x0b:
			esc = `\v`
		case 0x0c:
			esc = `\f`
		case 0x0d:
			esc = `\r`
		case 0x1b:
			esc = `\e`
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case 0x85:
			esc = `\N`
		case 0x2028:
			esc = `\L`
		case 0x2029:
			esc = `\P`
		}
		if !e.room(10) { // the longest escape, \UXXXXXXXX
			return
		}
		if esc != "" {
			e.buf = append(e.buf, esc...)
			e.column += 2
		} else {
			n := 8
			switch {
			case ch <= 0xff:
				e.buf = append(e.buf, `\x`...)
				n = 2
			case ch <= 0xffff:
				e.buf = append(e.buf, `\u`...)
				n = 4
			default:
				e.buf = append(e.buf, `\U`...)
			}
			for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
				e.buf = append(e.buf, upperHex[(ch>>uint(shift))&0xf])
			}
			e.column += 2 + n
		}
		end += size
		start = end
	}
	e.writeText(s[start:])
	e.writeIndicator(`"`, false, false, false)
}

// blockHints restates Emitter.determine_block_hints: an indentation
// indicator when the text starts with a space or a break, then "-" (strip)
// when it does not end with a break, "+" (keep) when it ends with two or
// is a single break, and nothing (clip) for exactly one final break.
func blockHints(s string) string {
	first, _ := utf8.DecodeRuneInString(s)
	last, lastSize := utf8.DecodeLastRuneInString(s)
	hints := ""
	if first == ' ' || isYAMLBreak(first) {
		hints = "2" // best_indent
	}
	if !isYAMLBreak(last) {
		return hints + "-"
	}
	rest := s[:len(s)-lastSize]
	if rest == "" {
		return hints + "+"
	}
	if prev, _ := utf8.DecodeLastRuneInString(rest); isYAMLBreak(prev) {
		return hints + "+"
	}
	return hints
}

// writeLiteral restates Emitter.write_literal. (Python does not advance the
// column for the text of a line; every line ends with a break, so it makes
// no difference.)
func (e *emitter) writeLiteral(s string) {
	hints := blockHints(s)
	e.writeIndicator("|"+hints, true, false, false)
	if strings.HasSuffix(hints, "+") {
		e.openEnded = true
	}
	e.writeLineBreak("\n")
	breaks := true
	start := 0
	for end := 0; end <= len(s); {
		var ch rune = -1
		size := 0
		if end < len(s) {
			ch, size = utf8.DecodeRuneInString(s[end:])
		}
		if breaks {
			if ch < 0 || !isYAMLBreak(ch) {
				e.writeBreaks(s[start:end])
				if ch >= 0 {
					e.writeIndent()
				}
				if e.over() {
					return
				}
				start = end
			}
		} else if ch < 0 || isYAMLBreak(ch) {
			if !e.room(end - start) {
				return
			}
			e.buf = append(e.buf, s[start:end]...)
			if ch < 0 {
				e.writeLineBreak("\n")
			}
			start = end
		}
		if ch >= 0 {
			breaks = isYAMLBreak(ch)
		}
		if size == 0 {
			break
		}
		end += size
	}
}
