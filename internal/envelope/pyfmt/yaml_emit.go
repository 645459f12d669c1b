package pyfmt

import (
	"unicode/utf8"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// emitter restates the part of PyYAML 6.0's Emitter (emitter.py) that
// yaml.dump reaches with LionAGI's settings: block collections
// (default_flow_style=False), "[]" and "{}" for empty ones, no anchors, no
// tags (every scalar resolves or is quoted), indent 2 and an unbounded
// width, so that no line is ever folded. Its fields are the Python
// emitter's state under the same names; the recursion below follows the
// emitter's state machine for the events the serializer sends.
type emitter struct {
	buf []byte
	// limit, when positive, is where writing stops: every write first
	// checks room() and, when it would pass the limit, writes nothing and
	// sets stopped; the collection loops and the line-by-line scalar
	// writers then give up. The buffer never holds more than limit bytes.
	limit   int
	stopped bool

	indent  int // -1 stands for Python's None
	indents []int

	column     int  // in code points, as Python counts
	whitespace bool // the last character written is a space (or nothing yet)
	indention  bool // only indentation and indicators on this line so far
	openEnded  bool // the document needs "..." before the stream ends
}

// nodeContext holds the emitter's root/mapping/simple-key context flags
// for the node being written (the sequence flag changes nothing here).
type nodeContext uint8

const (
	ctxRoot nodeContext = 1 << iota
	ctxMapping
	ctxSimpleKey
)

// bestIndent is minimal_yaml's indent=2.
const bestIndent = 2

func (e *emitter) document(v jsonv.Value) {
	e.indent = -1
	e.whitespace = true
	e.indention = true
	e.node(v, ctxRoot)
	if e.over() {
		return
	}
	// DocumentEnd (implicit), then StreamEnd.
	e.writeIndent()
	if e.openEnded {
		e.writeIndicator("...", true, false, false)
		e.writeIndent()
	}
}

func (e *emitter) node(v jsonv.Value, ctx nodeContext) {
	switch v.Kind() {
	case jsonv.Null:
		e.plainScalar("null", ctx)
	case jsonv.Bool:
		if t, _ := v.Bool(); t {
			e.plainScalar("true", ctx)
		} else {
			e.plainScalar("false", ctx)
		}
	case jsonv.Number:
		if v.IsFloat() {
			e.plainScalar(yamlFloatText(pyFloat(v.Literal())), ctx)
		} else {
			e.plainScalar(pyIntText(v.Literal()), ctx)
		}
	case jsonv.String:
		s, _ := v.Str()
		s = validUTF8(s)
		e.stringScalar(s, analyze(s), ctx)
	case jsonv.Array:
		if v.Len() == 0 {
			e.emptyFlow("[", "]")
			return
		}
		e.blockSequence(v.Elems(), ctx)
	case jsonv.Object:
		if v.Len() == 0 {
			e.emptyFlow("{", "}")
			return
		}
		e.blockMapping(v.Members())
	}
}

// emptyFlow writes an empty collection in flow style, the only flow
// collections this dumper writes.
func (e *emitter) emptyFlow(open, close string) {
	e.writeIndicator(open, true, true, false)
	e.writeIndicator(close, false, false, false)
}

func (e *emitter) blockSequence(items []jsonv.Value, ctx nodeContext) {
	// A sequence that is a mapping's value on the key's line sits at the
	// key's indentation ("key:\n- a").
	indentless := ctx&ctxMapping != 0 && !e.indention
	e.increaseIndent(false, indentless)
	for _, item := range items {
		if e.over() {
			break
		}
		e.writeIndent()
		e.writeIndicator("-", true, false, true)
		e.node(item, 0)
	}
	e.popIndent()
}

func (e *emitter) blockMapping(members []jsonv.Member) {
	e.increaseIndent(false, false)
	for _, m := range members {
		if e.over() {
			break
		}
		e.writeIndent()
		key := validUTF8(m.Key)
		a := analyze(key)
		if a.simpleKey() {
			e.stringScalar(key, a, ctxMapping|ctxSimpleKey)
			e.writeIndicator(":", false, false, false)
			e.node(m.Value, ctxMapping)
			continue
		}
		// Complex key: "? key" then ": value" on the next line.
		e.writeIndicator("?", true, false, true)
		e.stringScalar(key, a, ctxMapping)
		e.writeIndent()
		e.writeIndicator(":", true, false, true)
		e.node(m.Value, ctxMapping)
	}
	e.popIndent()
}

func (e *emitter) increaseIndent(flow, indentless bool) {
	e.indents = append(e.indents, e.indent)
	switch {
	case e.indent < 0 && flow:
		e.indent = bestIndent
	case e.indent < 0:
		e.indent = 0
	case !indentless:
		e.indent += bestIndent
	}
}

func (e *emitter) popIndent() {
	n := len(e.indents) - 1
	e.indent = e.indents[n]
	e.indents = e.indents[:n]
}

// writeIndicator writes an ASCII indicator, after a space unless the last
// character written was one (or needWhitespace is false).
func (e *emitter) writeIndicator(ind string, needWhitespace, whitespace, indention bool) {
	space := !e.whitespace && needWhitespace
	if !e.room(len(ind) + b2i(space)) {
		return
	}
	if space {
		e.buf = append(e.buf, ' ')
		e.column++
	}
	e.buf = append(e.buf, ind...)
	e.column += len(ind)
	e.whitespace = whitespace
	e.indention = e.indention && indention
	e.openEnded = false
}

// writeIndent moves to the current indentation, on a new line unless the
// line holds only indentation and indicators that end before it.
func (e *emitter) writeIndent() {
	indent := max(e.indent, 0)
	need, column := 0, e.column
	if !e.indention || e.column > indent || (e.column == indent && !e.whitespace) {
		need, column = 1, 0
	}
	if !e.room(need + max(indent-column, 0)) {
		return
	}
	if need == 1 {
		e.writeLineBreak("\n")
	}
	if e.column < indent {
		e.whitespace = true
		for ; e.column < indent; e.column++ {
			e.buf = append(e.buf, ' ')
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// over reports whether writing stopped at the limit.
func (e *emitter) over() bool { return e.stopped }

// room reports whether n more bytes fit within the limit; when they do
// not, writing stops for good.
func (e *emitter) room(n int) bool {
	if e.limit <= 0 {
		return true
	}
	if e.stopped || len(e.buf)+n > e.limit {
		e.stopped = true
		return false
	}
	return true
}

// writeBreaks writes a run of line breaks from inside a scalar, each as
// it is ("\n", NEL, LS or PS), as Python's write_line_break(br) does.
func (e *emitter) writeBreaks(run string) {
	for i := 0; i < len(run); {
		_, size := utf8.DecodeRuneInString(run[i:])
		e.writeLineBreak(run[i : i+size])
		i += size
	}
}

// writeLineBreak writes one line break.
func (e *emitter) writeLineBreak(br string) {
	if !e.room(len(br)) {
		return
	}
	e.buf = append(e.buf, br...)
	e.whitespace = true
	e.indention = true
	e.column = 0
}
