package envelope

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
)

// orjsonDumps writes v as LionAGI's orjson.dumps does in the ResponseFormat
// section: compact, UTF-8, floats in orjson's (ryu's) notation ("1e20",
// "0.000025"). orjson refuses integers outside 64 bits; LionAGI then falls
// back to Python's str() of the value, and so does this.
func orjsonDumps(v jsonv.Value) string {
	if hasHugeInt(v) {
		return pyfmt.Str(v)
	}
	var b strings.Builder
	writeOrjson(&b, v)
	return b.String()
}

func hasHugeInt(v jsonv.Value) bool {
	switch v.Kind() {
	case jsonv.Number:
		if !v.IsInteger() {
			return false
		}
		return !pyfmt.FitsOrjsonInt(v.Literal()) // by the text: big.Int's parse is quadratic in the digits
	case jsonv.Array:
		for _, e := range v.Elems() {
			if hasHugeInt(e) {
				return true
			}
		}
	case jsonv.Object:
		for _, m := range v.Members() {
			if hasHugeInt(m.Value) {
				return true
			}
		}
	}
	return false
}

func writeOrjson(b *strings.Builder, v jsonv.Value) {
	switch v.Kind() {
	case jsonv.Number:
		if v.IsInteger() {
			n, _ := v.Int()
			b.WriteString(n.String())
			return
		}
		f, _ := v.Float64()
		b.WriteString(ryuFormat(f))
	case jsonv.Array:
		b.WriteByte('[')
		for i, e := range v.Elems() {
			if i > 0 {
				b.WriteByte(',')
			}
			writeOrjson(b, e)
		}
		b.WriteByte(']')
	case jsonv.Object:
		b.WriteByte('{')
		for i, m := range v.Members() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(jsonv.AppendQuoted(nil, m.Key))
			b.WriteByte(':')
			writeOrjson(b, m.Value)
		}
		b.WriteByte('}')
	default:
		b.Write(jsonv.AppendJSON(nil, v))
	}
}

// ryuFormat writes a float as orjson does (jsonv.FormatFloatOrjson).
func ryuFormat(f float64) string { return jsonv.FormatFloatOrjson(f) }

// fuzzyParseJSON is LionAGI's fuzzy_json (lionagi/ln/fuzzy/_fuzzy_json.py,
// 669ea9b5), which to_dict(fuzzy_parse=True) applies to text: blank text is
// an error; then strict JSON, the state-machine cleaning, the regex
// cleaning, and the bracket fixing of either cleaned text are tried in that
// order, each parsed as orjson.loads parses (orjsonLoads: its number rules
// included), the first that parses giving the result, which must be an object or
// a list (a scalar is an error at once, as LionAGI's TypeError is not caught
// by the later steps).
//
// Its cost is linear in len(s): a fixed number of single passes (the two
// cleanings, Go's regexp, which is linear, the bracket fixing and at most
// five parses), so an argument text of any size the message limit lets in
// takes bounded work and nothing in it needs to check the request's ctx
// (TestFuzzyParseJSONIsLinear).
func fuzzyParseJSON(s string) (jsonv.Value, error) {
	if trimPythonWhitespace(s) == "" {
		return jsonv.Value{}, errors.New("input string is empty")
	}
	structured := func(v jsonv.Value) (jsonv.Value, error) {
		if k := v.Kind(); k != jsonv.Object && k != jsonv.Array {
			return jsonv.Value{}, fmt.Errorf("fuzzy_json returns dict or list, got JSON %s", k)
		}
		return v, nil
	}
	if v, err := orjsonLoads(s); err == nil {
		return structured(v)
	}
	cleaned := cleanJSONSafe(s)
	if v, err := orjsonLoads(cleaned); err == nil {
		return structured(v)
	}
	cleanedRegex := cleanJSONRegex(strings.ReplaceAll(s, "'", `"`))
	if v, err := orjsonLoads(cleanedRegex); err == nil {
		return structured(v)
	}
	for _, candidate := range []string{cleaned, cleanedRegex} {
		fixed, err := fixJSONBrackets(candidate)
		if err != nil {
			return jsonv.Value{}, err
		}
		if v, err := orjsonLoads(fixed); err == nil {
			return structured(v)
		}
	}
	return jsonv.Value{}, errors.New("invalid JSON string")
}

// errOrjsonInfinity is orjson's refusal of a number too large for a double.
var errOrjsonInfinity = errors.New("number is infinity when parsed as double")

// orjsonLoads parses s as orjson.loads (3.8, fuzzy_json's parser) does: strict JSON whose
// numbers are what orjson makes of them. An integer in [-2^63, 2^64-1] stays an integer (the
// integer -0 is 0); any other integer is a float; a float is the nearest double (1e-400 is 0.0);
// a number too large for a double fails the parse. Floats are held in orjson's notation
// (jsonv.FloatValue), as LionAGI writes the value it holds: {"a": 1E5} is {"a":100000.0}.
func orjsonLoads(s string) (jsonv.Value, error) {
	v, err := jsonv.ParseString(s)
	if err != nil {
		return jsonv.Value{}, err
	}
	out, _, ok := pyfmt.OrjsonNumbers(v, true)
	if !ok {
		return jsonv.Value{}, errOrjsonInfinity
	}
	return out, nil
}

// cleanJSONSafe is _clean_json_string_safe: single-quoted strings become
// double-quoted ones (\' an apostrophe, inner " escaped), double-quoted
// strings pass as they are, a comma before ] or } is dropped, an unquoted
// key of letters, digits and _ after { or , is quoted; then Python's strip.
func cleanJSONSafe(in string) string {
	s := []rune(in)
	var out strings.Builder
	isWS := func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
	for pos := 0; pos < len(s); {
		c := s[pos]
		switch {
		case c == '\'':
			out.WriteByte('"')
			pos++
			for pos < len(s) {
				ic := s[pos]
				if ic == '\\' {
					if pos+1 < len(s) {
						if s[pos+1] == '\'' {
							out.WriteByte('\'')
						} else {
							out.WriteRune(ic)
							out.WriteRune(s[pos+1])
						}
						pos += 2
						continue
					}
					out.WriteRune(ic)
					pos++
					continue
				}
				if ic == '\'' {
					out.WriteByte('"')
					pos++
					break
				}
				if ic == '"' {
					out.WriteString(`\"`)
					pos++
					continue
				}
				out.WriteRune(ic)
				pos++
			}
		case c == '"':
			out.WriteRune(c)
			pos++
			for pos < len(s) {
				ic := s[pos]
				if ic == '\\' {
					out.WriteRune(ic)
					if pos+1 < len(s) {
						pos++
						out.WriteRune(s[pos])
					}
					pos++
					continue
				}
				out.WriteRune(ic)
				pos++
				if ic == '"' {
					break
				}
			}
		case c == '{' || c == ',':
			if c == ',' {
				look := pos + 1
				for look < len(s) && isWS(s[look]) {
					look++
				}
				if look < len(s) && (s[look] == ']' || s[look] == '}') {
					pos++ // a trailing comma
					continue
				}
			}
			out.WriteRune(c)
			pos++
			for pos < len(s) && isWS(s[pos]) {
				out.WriteRune(s[pos])
				pos++
			}
			if pos < len(s) && s[pos] != '"' && s[pos] != '\'' && s[pos] != '{' && s[pos] != '[' {
				keyStart := pos
				for pos < len(s) && (isPythonAlnum(s[pos]) || s[pos] == '_') {
					pos++
				}
				if pos < len(s) && keyStart < pos {
					keyEnd := pos
					for pos < len(s) && isWS(s[pos]) {
						pos++
					}
					if pos < len(s) && s[pos] == ':' {
						out.WriteString(`"` + string(s[keyStart:keyEnd]) + `"`)
						continue
					}
					pos = keyStart // not a key
				}
			}
		default:
			out.WriteRune(c)
			pos++
		}
	}
	return trimPythonWhitespace(out.String())
}

// isPythonAlnum is str.isalnum for one character.
func isPythonAlnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

var (
	trailingCommaRe = regexp.MustCompile(`,\s*([}\]])`)
	unquotedKeyRe   = regexp.MustCompile(`([{,])\s*([^"\s]+)\s*:`)
)

// cleanJSONRegex is _clean_json_string, given text whose single quotes are
// already double quotes: runs of whitespace become one space, a comma before
// } or ] is dropped, a key after { or , is quoted; then Python's strip.
// After the first step the only whitespace left is " ", which Go's \s and
// Python's agree on.
func cleanJSONRegex(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if isPythonSpace(r) {
			if !space {
				b.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		b.WriteRune(r)
	}
	s = trailingCommaRe.ReplaceAllString(b.String(), "$1")
	s = unquotedKeyRe.ReplaceAllString(s, `$1"$2":`)
	return trimPythonWhitespace(s)
}

// fixJSONBrackets is fix_json_string: it closes the brackets left open
// (outside strings, a backslash skipping the next character), and fails on
// an extra or mismatched closing bracket.
func fixJSONBrackets(in string) (string, error) {
	if in == "" {
		return "", errors.New("input string is empty")
	}
	s := []rune(in)
	var open []rune
	for pos := 0; pos < len(s); {
		c := s[pos]
		switch {
		case c == '\\':
			pos += 2
			continue
		case c == '"':
			pos++
			for pos < len(s) {
				if s[pos] == '\\' {
					pos += 2
					continue
				}
				if s[pos] == '"' {
					pos++
					break
				}
				pos++
			}
			continue
		case c == '{':
			open = append(open, '}')
		case c == '[':
			open = append(open, ']')
		case c == '}' || c == ']':
			if len(open) == 0 {
				return "", errors.New("extra closing bracket found")
			}
			if open[len(open)-1] != c {
				return "", errors.New("mismatched brackets")
			}
			open = open[:len(open)-1]
		}
		pos++
	}
	// One builder, as LionAGI's "".join: appending to the string once per
	// open bracket would copy the text each time, quadratic in its length.
	var b strings.Builder
	b.Grow(len(in) + len(open))
	b.WriteString(in)
	for i := len(open) - 1; i >= 0; i-- {
		b.WriteRune(open[i])
	}
	return b.String(), nil
}
