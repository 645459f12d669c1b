package envelope

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// TestRyuFormatMatchesOrjson checks the float notation of the ResponseFormat
// section against orjson 3.8.3 itself (testdata/orjson_floats.txt, written
// by testdata/gen_orjson_floats.py): LionAGI renders a dict response format
// with orjson.dumps, so its numbers reach the prompt in orjson's notation.
func TestRyuFormatMatchesOrjson(t *testing.T) {
	f, err := os.Open("testdata/orjson_floats.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		repr, want, _ := strings.Cut(sc.Text(), " ")
		x, err := strconv.ParseFloat(repr, 64)
		if err != nil {
			t.Fatalf("bad golden line %q", sc.Text())
		}
		if got := ryuFormat(x); got != want {
			t.Errorf("ryuFormat(%s) = %s, orjson writes %s", repr, got, want)
		}
		if got := jsonv.FormatFloat(x); got != repr {
			t.Errorf("FormatFloat(%s) = %s, Python's repr writes %s", repr, got, repr)
		}
		n++
	}
	if n < 5000 {
		t.Fatalf("only %d golden floats", n)
	}
}

func TestOrjsonDumpsFallsBackToPythonStrForHugeInts(t *testing.T) {
	v, _ := jsonv.ParseString(`{"a":"x","n":123456789012345678901234567890}`)
	// orjson raises on integers beyond 64 bits; LionAGI then uses str(dict).
	if got, want := orjsonDumps(v), `{'a': 'x', 'n': 123456789012345678901234567890}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	v, _ = jsonv.ParseString(`{"a":"é\u2028","f":2.5e-05,"i":-3,"l":[true,null]}`)
	if got, want := orjsonDumps(v), "{\"a\":\"é\u2028\",\"f\":0.000025,\"i\":-3,\"l\":[true,null]}"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

// TestFuzzyParseJSONIsLionAGIs: ActionRequest arguments given as text go through LionAGI's
// fuzzy_json (lionagi/ln/fuzzy/_fuzzy_json.py, 669ea9b5): strict JSON, its state-machine
// cleaning, its regex cleaning, then its bracket fixing, the result an object or a list. Each
// want was recorded from fuzzy_json itself ("" where it raised).
func TestFuzzyParseJSONIsLionAGIs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{a: 1}", "{\"a\":1}"},
		{"{'a': 'x'}", "{\"a\":\"x\"}"},
		{"{\"a\": 1", "{\"a\":1}"},
		{"[{'a': 1},]", "[{\"a\":1}]"},
		{"```json\n{\"a\": 1}\n```", ""}, // ValueError: Invalid JSON string
		{"{'a': True}", ""},              // ValueError: Invalid JSON string
		{"{\"a\": 'b'}", "{\"a\":\"b\"}"},
		{"{'a': None}", ""}, // ValueError: Invalid JSON string
		{"{a:1,b:2}", "{\"a\":1,\"b\":2}"},
		{"{ key : 'v' , other: [1, 2,], }", "{\"key\":\"v\",\"other\":[1,2]}"},
		{"{'it\\'s': 1}", "{\"it's\":1}"},
		{"{'say \"hi\"': 1}", "{\"say \\\"hi\\\"\":1}"},
		{"{\"a\": [1, {\"b\": 2}", "{\"a\":[1,{\"b\":2}]}"},
		{"{\"a\": 1}}", ""}, // ValueError: Extra closing bracket found.
		{"[1, 2}", ""},      // ValueError: Mismatched brackets.
		{"{'a':\n  'multi   space'}", "{\"a\":\"multi   space\"}"},
		{"  ", ""},  // ValueError: Input string is empty
		{"5", ""},   // TypeError: fuzzy_json returns dict or list, got primitive type: int
		{"'5'", ""}, // TypeError: fuzzy_json returns dict or list, got primitive type: str
		{"[]", "[]"},
		{"{}", "{}"},
		{"{'a': 'b',}", "{\"a\":\"b\"}"},
		{"{été: 1}", "{\"été\":1}"},
		{"{a_b: 1, c-d: 2}", "{\"a_b\":1,\"c-d\":2}"},
		{"{'a': [1, 2, 3}", ""}, // ValueError: Mismatched brackets.
		{"{1: 'x'}", "{\"1\":\"x\"}"},
		{"{\"a\": \"x\\\"y\"}", "{\"a\":\"x\\\"y\"}"},
		{"{'a': \"it's\"}", "{\"a\":\"it's\"}"},
		{"[{a: 1}, {b: 2}]", "[{\"a\":1},{\"b\":2}]"},
		{"{\"a\":1,}", "{\"a\":1}"},
		{"{a: 'x: y'}", "{\"a\":\"x: y\"}"},
		{"{'a':'b'", "{\"a\":\"b\"}"},
		{"\t{'a': 1}\n", "{\"a\":1}"},
		{"{\"a\" : 1}", "{\"a\":1}"},
		{"{'a': 1} trailing", ""}, // ValueError: Invalid JSON string
		{"[[1, 2], [3", "[[1,2],[3]]"},
		{"{\"k\": \"v\" \"w\"}", ""}, // ValueError: Invalid JSON string
		{"{a: b}", ""},               // ValueError: Invalid JSON string
	} {
		v, err := fuzzyParseJSON(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("fuzzyParseJSON(%q) = %s; fuzzy_json raises", tc.in, v)
		case tc.want != "" && err != nil:
			t.Errorf("fuzzyParseJSON(%q): %v; fuzzy_json gives %s", tc.in, err, tc.want)
		case tc.want != "" && v.String() != tc.want:
			t.Errorf("fuzzyParseJSON(%q) = %s; fuzzy_json gives %s", tc.in, v, tc.want)
		}
	}
}

// TestFuzzyParseJSONReadsNumbersAsOrjson: fuzzy_json parses with orjson.loads, which reads an
// integer outside [-2^63, 2^64-1] as a float, the integer -0 as 0, and refuses a number too large
// for a double ("number is infinity when parsed as double", so the step fails and, every step
// failing alike, so does fuzzy_json); LionAGI then writes its floats in orjson's notation. Each
// want is the arguments LionAGI 0.27.0 exported (orjson.dumps of ActionRequest.from_dict with the
// text as arguments, then to_dict(mode="json")), recorded by running it; "" where it raised
// ("Arguments must be a dictionary").
func TestFuzzyParseJSONReadsNumbersAsOrjson(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1e400}`, ""},
		{`{"a": -1e400}`, ""},
		{`{'a': 1e400}`, ""},
		{`{"a": [1, 1e400`, ""},
		{`{"a": -0}`, `{"a":0}`},
		{`{"a": -0.0}`, `{"a":-0.0}`},
		{`{"a": 1E5}`, `{"a":100000.0}`},
		{`{"a": 1E+2}`, `{"a":100.0}`},
		{`{"a": 0.1e-7}`, `{"a":1e-8}`},
		{`{"a": 1.5e-5}`, `{"a":0.000015}`},
		{`{"a": 1e-400}`, `{"a":0.0}`},
		{`{"a": 100000000000000000000.0}`, `{"a":1e20}`},
		{`{"a": 18446744073709551615}`, `{"a":18446744073709551615}`},
		{`{"a": 18446744073709551616}`, `{"a":1.8446744073709552e19}`},
		{`{"a": -9223372036854775808}`, `{"a":-9223372036854775808}`},
		{`{"a": -9223372036854775809}`, `{"a":-9.223372036854776e18}`},
		{`{"a": 123456789012345678901234567890}`, `{"a":1.2345678901234568e29}`},
	} {
		v, err := fuzzyParseJSON(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("fuzzyParseJSON(%q) = %s; LionAGI refuses it", tc.in, v)
		case tc.want != "" && err != nil:
			t.Errorf("fuzzyParseJSON(%q): %v; LionAGI gives %s", tc.in, err, tc.want)
		case tc.want != "" && v.String() != tc.want:
			t.Errorf("fuzzyParseJSON(%q) = %s; LionAGI gives %s", tc.in, v, tc.want)
		}
	}
}

// TestFuzzyParseJSONHugeIntegers: an integer literal of any length is read by its text (orjson:
// past 64 bits a float, past a double's range a refusal). Its range was once read through
// big.Int, whose parse is quadratic in the digits (a 4 MB integer, within the message size limit,
// took over two minutes of CPU; BenchmarkNormalizeArgumentsHugeInteger measures it). The values
// are orjson 3's (orjson.dumps(orjson.loads(...)), run on the pyenv Python of lionagi-env.md).
func TestFuzzyParseJSONHugeIntegers(t *testing.T) {
	digits := func(n int) string { return "1" + strings.Repeat("7", n-1) }
	if v, err := fuzzyParseJSON(`{"a": ` + digits(300) + `}`); err != nil || v.String() != `{"a":1.777777777777778e299}` {
		t.Errorf("a 300-digit integer: %s, %v; want the float orjson makes of it", v, err)
	}
	for _, n := range []int{310, 4 << 20} {
		if v, err := fuzzyParseJSON(`{"a": ` + digits(n) + `}`); err == nil {
			t.Errorf("a %d-digit integer: %s; orjson refuses it (infinity as a double)", n, v)
		}
		if v, err := fuzzyParseJSON(`{"a": -` + digits(n) + `}`); err == nil {
			t.Errorf("a -%d-digit integer: %s; orjson refuses it", n, v)
		}
	}
}

// TestFuzzyParseJSONIsLinear: fuzzy_json runs on client text of any size
// (ActionRequest arguments, up to the message size limit), so each of its
// steps must be linear in the text's length. The bytes it allocates are the
// measure (no timing): for an input eight times longer a linear port
// allocates about eight times as much, a quadratic one about sixty-four
// times. The shapes are those that make a step revisit text: unclosed
// brackets (fix_json_string closes each), keys that are not keys (the
// state machine rescans them), and runs of whitespace and commas.
func TestFuzzyParseJSONIsLinear(t *testing.T) {
	shapes := map[string]string{
		"unclosed [":     "[",
		"unclosed {":     "{",
		"unclosed [{":    `[{"a":`,
		"not a key":      "{abc ",
		"comma space":    ", ",
		"quoted key run": `{'a':1,`,
		"colon run":      "{a:",
		"bare not a key": ",abc ",
		"bare colon run": ",a:",
		"quotes":         `'"\\`,
	}
	checkLinearAllocs(t, shapes, func(s string) { _, _ = NormalizeArguments(jsonv.StringValue(s)) })
}

// checkLinearAllocs fails a shape whose text repeated 8 times as often makes f allocate more than
// 16 times the bytes: work super-linear in the input, measured without timing anything.
func checkLinearAllocs(t *testing.T, shapes map[string]string, f func(string)) {
	t.Helper()
	const n = 4000
	allocated := func(s string) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f(s)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	for name, unit := range shapes {
		t.Run(name, func(t *testing.T) {
			small, large := allocated(strings.Repeat(unit, n)), allocated(strings.Repeat(unit, 8*n))
			if large > 16*small {
				t.Errorf("%d repeats allocate %d bytes, %d repeats %d: %.1f times as much, not about 8 (super-linear)",
					n, small, 8*n, large, float64(large)/float64(small))
			}
		})
	}
}
