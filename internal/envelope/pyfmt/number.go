package pyfmt

import (
	"math"
	"strconv"
	"strings"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// pyIntText returns str(int(lit)) for a JSON integer literal: the digits as
// written, except that "-0" reads back as 0. JSON forbids leading zeros and
// a plus sign, so nothing else can differ.
func pyIntText(lit string) string {
	if lit == "-0" {
		return "0"
	}
	return lit
}

// pyFloat returns float(lit) as Python's json module computes it:
// correctly rounded, ±inf past the largest double, ±0.0 below the smallest.
func pyFloat(lit string) float64 {
	f, _ := strconv.ParseFloat(lit, 64) // ±Inf on overflow, as Python
	return f
}

// pyFloatRepr returns repr(f) for a float that json.loads can produce
// (never NaN).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return jsonv.FormatFloat(f)
}

// yamlFloatText returns PyYAML's SafeRepresenter text for a float:
// .inf / -.inf, else repr() with ".0" slipped in before an exponent that
// has no decimal point ("1e+20" becomes "1.0e+20", a valid !!float).
func yamlFloatText(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	s := jsonv.FormatFloat(f)
	if i := strings.IndexByte(s, 'e'); i >= 0 && strings.IndexByte(s[:i], '.') < 0 {
		return s[:i] + ".0" + s[i:]
	}
	return s
}

// pyNumberText returns str() of a JSON number as json.loads reads it.
func pyNumberText(v jsonv.Value) string {
	if v.IsFloat() {
		return pyFloatRepr(pyFloat(v.Literal()))
	}
	return pyIntText(v.Literal())
}
