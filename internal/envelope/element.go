package envelope

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// nowFunc is the clock; tests replace it to pin "now".
var nowFunc = time.Now

// nowTimestamp returns the current UTC time as LionAGI stores it: Unix
// seconds as a float (ADR-0001 D1), at microsecond precision like Python's
// datetime.
func nowTimestamp() float64 {
	return float64(nowFunc().UnixMicro()) / 1e6
}

// ParseCreatedAt applies ADR-0001 D1's created_at rules to a JSON value:
// null means now; a number (or true/false, as Python's float(True)) is kept
// as a float; a string is read first as ISO 8601 text (a space may stand for
// the T; a value without an offset is UTC), then as a decimal number. Every
// other input is an error naming the value.
func ParseCreatedAt(v jsonv.Value) (float64, error) {
	switch v.Kind() {
	case jsonv.Null:
		return nowTimestamp(), nil
	case jsonv.Bool:
		if b, _ := v.Bool(); b {
			return 1, nil
		}
		return 0, nil
	case jsonv.Number:
		f := numberFloat(v)
		if math.IsInf(f, 0) {
			return 0, fieldErr("created_at", "Invalid created_at: %s is out of range", v.Literal())
		}
		return f, nil
	case jsonv.String:
		s, _ := v.Str()
		return parseCreatedAtString(s)
	}
	return 0, fieldErr("created_at", "Invalid created_at: %s is not a timestamp", v.Kind())
}

// numberFloat is Python's float() of a JSON number: an integer has no
// negative zero, so the integer -0 is 0.0 (ParseFloat would give -0.0).
func numberFloat(v jsonv.Value) float64 {
	f, _ := v.Float64()
	if f == 0 && v.IsInteger() {
		return 0
	}
	return f
}

func parseCreatedAtString(s string) (float64, error) {
	if t, ok := parseISO(strings.ReplaceAll(s, " ", "T")); ok {
		return float64(t.UnixMicro()) / 1e6, nil
	}
	if f, ok := parsePythonFloat(s); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return f, nil
	}
	return 0, fieldErr("created_at", "Invalid datetime string: %q", s)
}

// parsePythonFloat reads a string as Python's float() does for the decimal
// forms: surrounding whitespace is ignored and single underscores may
// separate digits.
func parsePythonFloat(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "_") {
		if strings.Contains(s, "__") || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") {
			return 0, false
		}
		s = strings.ReplaceAll(s, "_", "")
	}
	if s == "" || strings.ContainsAny(s, "xXpP") { // no hex floats in Python's float()
		return 0, false
	}
	lower := strings.ToLower(strings.TrimLeft(s, "+-"))
	if lower == "nan" || lower == "inf" || lower == "infinity" {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return f, false
	}
	return f, true
}

// parseISO reads the ISO 8601 forms Python 3.11's datetime.fromisoformat
// accepts for LionAGI's timestamps: a date (YYYY-MM-DD or YYYYMMDD),
// optionally followed by T and a time (HH, HH:MM, HH:MM:SS, with a fraction
// of up to 6 digits after . or ,, or the basic forms HHMM / HHMMSS) and an
// offset (Z, ±HH, ±HH:MM, ±HHMM, ±HH:MM:SS). A value without an offset is
// UTC (ADR-0001 D1: "a timezone-naive parsed string is treated as UTC").
func parseISO(s string) (time.Time, bool) {
	date, rest, hasTime := strings.Cut(s, "T")
	y, mo, d, ok := parseISODate(date)
	if !ok {
		return time.Time{}, false
	}
	var hh, mm, ss, micro int
	loc := time.UTC
	if hasTime {
		timePart, offset, hasOffset := splitOffset(rest)
		if hh, mm, ss, micro, ok = parseISOTime(timePart); !ok {
			return time.Time{}, false
		}
		if hasOffset {
			if loc, ok = parseOffset(offset); !ok {
				return time.Time{}, false
			}
		}
	}
	t := time.Date(y, time.Month(mo), d, hh, mm, ss, micro*1000, loc)
	// time.Date normalises out-of-range fields; Python rejects them.
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d || hh > 23 || mm > 59 || ss > 59 {
		return time.Time{}, false
	}
	return t, true
}

func parseISODate(s string) (y, m, d int, ok bool) {
	switch {
	case len(s) == 10 && s[4] == '-' && s[7] == '-':
		y, ok1 := atoiDigits(s[0:4])
		m, ok2 := atoiDigits(s[5:7])
		d, ok3 := atoiDigits(s[8:10])
		return y, m, d, ok1 && ok2 && ok3 && y >= 1 && m >= 1 && m <= 12 && d >= 1
	case len(s) == 8:
		y, ok1 := atoiDigits(s[0:4])
		m, ok2 := atoiDigits(s[4:6])
		d, ok3 := atoiDigits(s[6:8])
		return y, m, d, ok1 && ok2 && ok3 && y >= 1 && m >= 1 && m <= 12 && d >= 1
	}
	return 0, 0, 0, false
}

func splitOffset(s string) (timePart, offset string, ok bool) {
	if i := strings.IndexAny(s, "Z+-"); i >= 0 {
		return s[:i], s[i:], true
	}
	return s, "", false
}

func parseISOTime(s string) (hh, mm, ss, micro int, ok bool) {
	frac := ""
	if i := strings.IndexAny(s, ".,"); i >= 0 {
		s, frac = s[:i], s[i+1:]
		if frac == "" || len(frac) > 9 {
			return 0, 0, 0, 0, false
		}
		for len(frac) < 6 {
			frac += "0"
		}
		var okf bool
		if micro, okf = atoiDigits(frac[:6]); !okf {
			return 0, 0, 0, 0, false
		}
		if _, okf = atoiDigits(frac); !okf {
			return 0, 0, 0, 0, false
		}
	}
	var parts []string
	switch {
	case strings.Contains(s, ":"):
		parts = strings.Split(s, ":")
	case len(s) == 2 || len(s) == 4 || len(s) == 6:
		for i := 0; i < len(s); i += 2 {
			parts = append(parts, s[i:i+2])
		}
	default:
		return 0, 0, 0, 0, false
	}
	if len(parts) > 3 || (frac != "" && len(parts) != 3) {
		return 0, 0, 0, 0, false
	}
	vals := [3]int{}
	for i, p := range parts {
		if len(p) != 2 {
			return 0, 0, 0, 0, false
		}
		n, okp := atoiDigits(p)
		if !okp {
			return 0, 0, 0, 0, false
		}
		vals[i] = n
	}
	return vals[0], vals[1], vals[2], micro, true
}

func parseOffset(s string) (*time.Location, bool) {
	if s == "Z" {
		return time.UTC, true
	}
	sign := 1
	if s[0] == '-' {
		sign = -1
	}
	hh, mm, ss, micro, ok := parseISOTime(s[1:])
	if !ok || hh > 23 || mm > 59 || ss > 59 {
		return nil, false
	}
	secs := sign * (hh*3600 + mm*60 + ss)
	_ = micro // Python allows microseconds in offsets; time.FixedZone does not, and none occur in practice.
	return time.FixedZone("", secs), true
}

func atoiDigits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// NormalizeMetadata applies ADR-0001 D1 to a metadata value: falsy values
// (null, false, 0, "", [], {}) become an empty object; an object is kept in
// order; any other truthy value is an error (LionAGI 0.27 silently drops it;
// docs/design.md#metadata: "a network service should say no").
func NormalizeMetadata(v jsonv.Value) (jsonv.Value, error) {
	if !v.Truthy() {
		return jsonv.ObjectValue(), nil
	}
	if v.Kind() != jsonv.Object {
		return jsonv.Value{}, fieldErr("metadata", "invalid metadata: not a JSON object (got %s)", v.Kind())
	}
	return v, nil
}

// ParseEmbedding applies ADR-0001 D4's embedding rules: null stays null (a
// nil slice and false); a list, or a string holding a JSON list, converts
// every member as Python's float() would; anything else is an error.
func ParseEmbedding(v jsonv.Value) (emb []float64, present bool, err error) {
	switch v.Kind() {
	case jsonv.Null:
		return nil, false, nil
	case jsonv.String:
		s, _ := v.Str()
		list, perr := jsonv.ParseString(s)
		if perr != nil || list.Kind() != jsonv.Array {
			return nil, false, fieldErr("embedding", "Invalid embedding string.")
		}
		emb, err = embeddingList(list)
		if err != nil {
			return nil, false, fieldErr("embedding", "Invalid embedding string.")
		}
		return emb, true, nil
	case jsonv.Array:
		emb, err = embeddingList(v)
		if err != nil {
			return nil, false, fieldErr("embedding", "Invalid embedding list.")
		}
		return emb, true, nil
	}
	return nil, false, fieldErr("embedding", "Invalid embedding type; must be list or JSON-encoded string.")
}

func embeddingList(list jsonv.Value) ([]float64, error) {
	out := make([]float64, 0, list.Len())
	for _, e := range list.Elems() {
		var f float64
		switch e.Kind() {
		case jsonv.Number:
			f = numberFloat(e)
		case jsonv.Bool:
			if b, _ := e.Bool(); b {
				f = 1
			}
		case jsonv.String:
			s, _ := e.Str()
			var ok bool
			if f, ok = parsePythonFloat(s); !ok {
				return nil, fmt.Errorf("%w: not a number", ErrInvalid)
			}
		default:
			return nil, fmt.Errorf("%w: not a number", ErrInvalid)
		}
		// JSON cannot carry NaN or infinities, so neither can a stored embedding.
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: not a finite number", ErrInvalid)
		}
		out = append(out, f)
	}
	return out, nil
}
