package envelope

import (
	"math/big"
	"strconv"
	"strings"

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
		n, _ := v.Int()
		return n.Cmp(minInt64) < 0 || n.Cmp(maxUint64) > 0
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

var (
	minInt64  = big.NewInt(-1 << 63)
	maxUint64 = new(big.Int).SetUint64(1<<64 - 1)
)

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

// ryuFormat writes a finite float as the Rust ryu crate (used by orjson)
// does: the shortest round-tripping digits, positional between 1e-5 and
// 1e16, scientific outside ("1e20", "1.5e-7"); infinities, which JSON
// cannot hold, become null as orjson writes them.
func ryuFormat(f float64) string {
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

// fuzzyParseJSON reads argument text the way LionAGI's fuzzy to_dict does
// for the common cases: strict JSON first, then with single quotes turned
// into double quotes and trailing commas removed (Python-literal-looking
// text). Anything else is an error.
func fuzzyParseJSON(s string) (jsonv.Value, error) {
	v, err := jsonv.ParseString(s)
	if err == nil {
		return v, nil
	}
	fixed := strings.TrimSpace(s)
	if !strings.Contains(fixed, `"`) {
		fixed = strings.ReplaceAll(fixed, "'", `"`)
	}
	fixed = strings.NewReplacer(",}", "}", ",]", "]", ", }", "}", ", ]", "]").Replace(fixed)
	if v2, err2 := jsonv.ParseString(fixed); err2 == nil {
		return v2, nil
	}
	return jsonv.Value{}, err
}
