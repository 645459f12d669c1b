package pyfmt

import (
	"math"
	"strconv"
	"strings"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// MinimalYAML returns LionAGI 0.27.0's minimal_yaml(value) with its
// defaults: empties pruned (drop_empties=True), block style, keys in
// insertion order, unicode kept, indent 2, no line folding. A string value
// is first read as JSON, as LionAGI does with orjson; when that fails it is
// rendered as the string it is.
//
// Pruning removes, bottom-up, null, strings that are empty or only
// whitespace (Python's str.strip()), and lists and dicts left empty; 0 and
// false stay. The top-level value itself is never removed.
func MinimalYAML(v jsonv.Value) string { return minimalYAML(v, true) }

// MinimalYAMLKeepEmpties returns LionAGI 0.27.0's
// minimal_yaml(value, drop_empties=False): MinimalYAML without the pruning.
func MinimalYAMLKeepEmpties(v jsonv.Value) string { return minimalYAML(v, false) }

func minimalYAML(v jsonv.Value, dropEmpties bool) string {
	s, _, _ := minimalYAMLWithin(v, dropEmpties, 0)
	return s
}

// MinimalYAMLWithin is MinimalYAML that stops writing once its output
// passes limit bytes (issue 11: a value nested ~1,000 deep turns each item
// into ~2 KB of indentation, so the output can be hundreds of times the
// input). It returns the text and ok=true when the whole rendering is at
// most limit bytes; otherwise "", the bytes written when it stopped (never
// more than limit: the write that would have passed it was not made) and
// ok=false. limit <= 0 means no limit.
func MinimalYAMLWithin(v jsonv.Value, limit int) (text string, written int, ok bool) {
	return minimalYAMLWithin(v, true, limit)
}

func minimalYAMLWithin(v jsonv.Value, dropEmpties bool, limit int) (string, int, bool) {
	if s, ok := v.Str(); ok {
		if parsed, ok := parseLikeOrjson(s); ok {
			v = parsed
		}
	}
	if dropEmpties {
		v, _ = prune(v)
	}
	st := getState()
	defer putState(st)
	e := &st.emitter
	e.limit = limit
	e.document(v)
	if e.over() {
		return "", len(e.buf), false
	}
	return string(e.buf), len(e.buf), true
}

// isEmpty is minimal_yaml's idea of an empty leaf: None, a string that
// strips to "", an empty list or dict. 0 and False are not empty.
func isEmpty(v jsonv.Value) bool {
	switch v.Kind() {
	case jsonv.Null:
		return true
	case jsonv.String:
		s, _ := v.Str()
		return isBlank(s)
	case jsonv.Array, jsonv.Object:
		return v.Len() == 0
	}
	return false
}

// prune removes empty members and elements recursively, then those that
// pruning left empty. It reports whether anything changed, and copies only
// the collections that did change.
func prune(v jsonv.Value) (jsonv.Value, bool) {
	switch v.Kind() {
	case jsonv.Array:
		elems := v.Elems()
		var out []jsonv.Value // nil until the first change
		for i, e := range elems {
			pe, changed := prune(e)
			drop := isEmpty(pe)
			if out == nil && (drop || changed) {
				out = make([]jsonv.Value, i, len(elems))
				copy(out, elems[:i])
			}
			if out != nil && !drop {
				out = append(out, pe)
			}
		}
		if out == nil {
			return v, false
		}
		return jsonv.ArrayValue(out...), true
	case jsonv.Object:
		members := v.Members()
		var out []jsonv.Member
		for i, m := range members {
			pv, changed := prune(m.Value)
			drop := isEmpty(pv)
			if out == nil && (drop || changed) {
				out = make([]jsonv.Member, i, len(members))
				copy(out, members[:i])
			}
			if out != nil && !drop {
				out = append(out, jsonv.Member{Key: m.Key, Value: pv})
			}
		}
		if out == nil {
			return v, false
		}
		return jsonv.ObjectValue(out...), true
	}
	return v, false
}

// parseLikeOrjson reads s as orjson 3.8's loads() does for minimal_yaml's
// string argument: strict JSON, where an integer outside the 64-bit range
// [-2^63, 2^64-1] becomes a float and a number too large for a double
// fails the whole parse (orjson: "number is infinity when parsed as
// double").
func parseLikeOrjson(s string) (jsonv.Value, bool) {
	v, err := jsonv.ParseString(s)
	if err != nil {
		return jsonv.Value{}, false
	}
	v, _, ok := OrjsonNumbers(v, false)
	return v, ok
}

// OrjsonNumbers applies orjson's number rules to v (see parseLikeOrjson).
// With spell, every number is also written as orjson writes the value it
// holds (a float in its notation, 1E5 as 100000.0, the integer -0 as 0),
// as for a value LionAGI holds and exports; without, a number orjson keeps
// keeps its text (the YAML renderer reads it again). It reports whether
// anything changed, copying only the collections that did, and ok=false
// when orjson would reject the document. The range of an integer is read
// from its text: big.Int's parse is quadratic in the digits.
func OrjsonNumbers(v jsonv.Value, spell bool) (out jsonv.Value, changed, ok bool) {
	switch v.Kind() {
	case jsonv.Number:
		lit := v.Literal()
		if v.IsInteger() && FitsOrjsonInt(lit) {
			if spell && lit == "-0" { // the one such integer orjson spells otherwise: JSON has no leading zeros or "+"
				out, _ := jsonv.NumberLiteral("0")
				return out, true, true
			}
			return v, false, true
		}
		f := pyFloat(lit)
		if math.IsInf(f, 0) {
			return jsonv.Value{}, false, false
		}
		if v.IsFloat() && !spell {
			return v, false, true
		}
		if out := jsonv.FloatValue(f); out.Literal() != lit {
			return out, true, true
		}
		return v, false, true
	case jsonv.Array:
		elems := v.Elems()
		var outElems []jsonv.Value // nil until the first change
		for i, e := range elems {
			ne, ch, ok := OrjsonNumbers(e, spell)
			if !ok {
				return jsonv.Value{}, false, false
			}
			if ch && outElems == nil {
				outElems = make([]jsonv.Value, len(elems))
				copy(outElems, elems)
			}
			if outElems != nil {
				outElems[i] = ne
			}
		}
		if outElems == nil {
			return v, false, true
		}
		return jsonv.ArrayValue(outElems...), true, true
	case jsonv.Object:
		members := v.Members()
		var outMembers []jsonv.Member
		for i, m := range members {
			nv, ch, ok := OrjsonNumbers(m.Value, spell)
			if !ok {
				return jsonv.Value{}, false, false
			}
			if ch && outMembers == nil {
				outMembers = make([]jsonv.Member, len(members))
				copy(outMembers, members)
			}
			if outMembers != nil {
				outMembers[i].Value = nv
			}
		}
		if outMembers == nil {
			return v, false, true
		}
		return jsonv.ObjectValue(outMembers...), true, true
	}
	return v, false, true
}

// FitsOrjsonInt reports whether an integer literal lies in
// [-9223372036854775808, 18446744073709551615], which orjson keeps as int.
func FitsOrjsonInt(lit string) bool {
	if strings.HasPrefix(lit, "-") {
		_, err := strconv.ParseInt(lit, 10, 64)
		return err == nil
	}
	_, err := strconv.ParseUint(lit, 10, 64)
	return err == nil
}
