package jsonv

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"
)

func TestParseKeepsOrderAndLiterals(t *testing.T) {
	in := `{"b":1,"a":1.0,"c":[1e3,-0,2.50],"d":{"z":null,"y":true}}`
	v, err := ParseString(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.String(); got != in {
		t.Fatalf("round trip changed the text:\n got %s\nwant %s", got, in)
	}
	a, _ := v.Get("a")
	if !a.IsFloat() || a.IsInteger() {
		t.Fatalf("1.0 must stay a float")
	}
	b, _ := v.Get("b")
	if !b.IsInteger() {
		t.Fatalf("1 must stay an integer")
	}
}

func TestParseDuplicateKeyLastWinsAtFirstPosition(t *testing.T) {
	v, err := ParseString(`{"a":1,"b":2,"a":3}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.String(), `{"a":3,"b":2}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	// Same rule past the map threshold.
	var sb strings.Builder
	sb.WriteString("{")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&sb, `"k%02d":1,`, i)
	}
	sb.WriteString(`"k00":2}`)
	v, err = ParseString(sb.String())
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 40 || v.Members()[0].Value.Literal() != "2" {
		t.Fatalf("duplicate key in a large object: len %d first %s", v.Len(), v.Members()[0].Value)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"", " ", "{", "[1,]", `{"a"}`, `{"a":1,}`, "01", "1.", "1e", "-", "+1",
		`"\x"`, "\"a\x01\"", `"\ud800"`, "nul", "[1] 2", "\"\xff\"", "NaN", "Infinity",
		strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2),
	} {
		if _, err := ParseString(in); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", in)
		}
	}
}

func TestParseUnicodeEscapes(t *testing.T) {
	v, err := ParseString(`"\u00e9\ud83d\ude00\n\/"`)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := v.Str(); s != "é😀\n/" {
		t.Fatalf("got %q", s)
	}
	if got := v.String(); got != `"é😀\n/"` {
		t.Fatalf("encode got %s", got)
	}
}

func TestFormatFloatMatchesPythonRepr(t *testing.T) {
	cases := map[float64]string{
		1.0:                    "1.0",
		0.1:                    "0.1",
		1e20:                   "1e+20",
		1e16:                   "1e+16",
		1e15:                   "1000000000000000.0",
		1e-7:                   "1e-07",
		2.5e-5:                 "2.5e-05",
		0.0001:                 "0.0001",
		123456789.0:            "123456789.0",
		1700000000.5:           "1700000000.5",
		-1.5:                   "-1.5",
		math.Copysign(0, -1):   "-0.0",
		1.7976931348623157e308: "1.7976931348623157e+308",
		5e-324:                 "5e-324",
		12345.678:              "12345.678",
	}
	for f, want := range cases {
		if got := FormatFloat(f); got != want {
			t.Errorf("FormatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestEqualComparesNumbersByValue(t *testing.T) {
	mustParse := func(s string) Value {
		v, err := ParseString(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !Equal(mustParse(`{"a":1,"b":[2.0]}`), mustParse(`{"b":[2],"a":1.0}`)) {
		t.Fatal("numbers and key order must not matter")
	}
	if Equal(mustParse(`true`), mustParse(`1`)) {
		t.Fatal("true must not equal 1")
	}
	if Equal(mustParse(`100000000000000000001`), mustParse(`100000000000000000000`)) {
		t.Fatal("big integers must compare exactly")
	}
	if !Equal(mustParse(`1e2`), mustParse(`100`)) {
		t.Fatal("1e2 == 100 in Python")
	}
}

func TestTruthy(t *testing.T) {
	for in, want := range map[string]bool{
		`null`: false, `false`: false, `0`: false, `0.0`: false, `""`: false, `[]`: false, `{}`: false,
		`true`: true, `1`: true, `-0.5`: true, `" "`: true, `[0]`: true, `{"a":null}`: true,
	} {
		v, err := ParseString(in)
		if err != nil {
			t.Fatal(err)
		}
		if v.Truthy() != want {
			t.Errorf("Truthy(%s) = %v", in, !want)
		}
	}
}

func TestSetAndDeleteDoNotMutate(t *testing.T) {
	v, _ := ParseString(`{"a":1,"b":2}`)
	w := v.Set("a", IntValue(9)).Set("c", StringValue("x"))
	if v.String() != `{"a":1,"b":2}` {
		t.Fatalf("Set mutated its receiver: %s", v)
	}
	if w.String() != `{"a":9,"b":2,"c":"x"}` {
		t.Fatalf("Set got %s", w)
	}
	if d := w.Delete("b"); d.String() != `{"a":9,"c":"x"}` || w.String() != `{"a":9,"b":2,"c":"x"}` {
		t.Fatalf("Delete got %s (receiver %s)", d, w)
	}
}

func FuzzParseRoundTrip(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x"],"b":null}`, `"\u00e9"`, `[]`, `-0.0e-5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseString(s)
		if err != nil {
			return
		}
		text := v.String()
		w, err := ParseString(text)
		if err != nil {
			t.Fatalf("re-parse of %q failed: %v", text, err)
		}
		if w.String() != text {
			t.Fatalf("encoding is not stable: %q then %q", text, w.String())
		}
	})
}

// EncodedLen is len(Marshal(v)) (issue 11: the response budget is checked before the text exists).
func TestEncodedLen(t *testing.T) {
	for _, text := range []string{
		`null`, `true`, `1.5e3`, `"a\u0000\"é"`, `[]`, `{}`, `[1,[2,[3]],{"k":"v"}]`,
		`{"a\"b":{"c":[null,false,"\ud83d\ude00",{"":""}]},"n":-0.0}`,
	} {
		v, err := ParseString(text)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := EncodedLen(v), len(Marshal(v)); got != want {
			t.Errorf("EncodedLen(%s) = %d, want %d", text, got, want)
		}
	}
}

// TestValueSize: a Value is 16 bytes, an object member 32 (issue 8: resident memory per stored 1 KB
// message at most 2.5 KB; an Instruction's content holds three Values and every message one), and
// a string or number read back is the text it was made from, empty ones included.
func TestValueSize(t *testing.T) {
	if got := unsafe.Sizeof(Value{}); got != 16 {
		t.Errorf("a Value is %d bytes, want 16", got)
	}
	if got := unsafe.Sizeof(Member{}); got != 32 {
		t.Errorf("a Member is %d bytes, want 32", got)
	}
	for _, s := range []string{"", "x", strings.Repeat("é", 600)} {
		if got, ok := StringValue(s).Str(); !ok || got != s {
			t.Errorf("StringValue(%.10q).Str() = %.10q, %v", s, got, ok)
		}
	}
	if got, ok := IntValue(0).Str(); ok || got != "" {
		t.Errorf("a number's Str() = %q, %v; want \"\", false", got, ok)
	}
	if got := IntValue(-12).Literal(); got != "-12" {
		t.Errorf("IntValue(-12).Literal() = %q", got)
	}
	if got := StringValue("7").Literal(); got != "" {
		t.Errorf("a string's Literal() = %q, want empty", got)
	}
}
