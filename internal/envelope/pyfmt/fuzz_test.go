package pyfmt

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// fuzzValue reads data as JSON, or takes it as a string (possibly invalid
// UTF-8, which only hand-built values can hold) when it is not JSON.
func fuzzValue(data string) jsonv.Value {
	if v, err := jsonv.ParseString(data); err == nil {
		return v
	}
	return jsonv.StringValue(data)
}

var fuzzSeeds = []string{
	`{"a":1,"b":[1,2,{"c":"d"}],"e":{"f":{"g":"h"}}}`,
	`{"k":"a\nb","":[],"yes":null,"x":" ","l":[[1e400,-0],{"m":"x\n\n"}]}`,
	`{"k":"\u2028 '\"\t\u0085","12:30":"2024-01-01","0o17":1.0e+20}`,
	`"{\"json\": \"string is parsed first\"}"`,
	`[{"a":1},{"b":2}]`, `"plain"`, `"it's \"q\""`, `100000000000000000000`,
	"not json \xff\xfe", "- x\n  y",
}

// FuzzMinimalYAML: any value renders without panicking, always to the same
// bytes, as valid UTF-8 ending in a line break (every YAML document
// PyYAML writes does).
func FuzzMinimalYAML(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, data string, dropEmpties bool) {
		v := fuzzValue(data)
		render := MinimalYAMLKeepEmpties
		if dropEmpties {
			render = MinimalYAML
		}
		out := render(v)
		if again := render(v); again != out {
			t.Fatalf("not deterministic:\n%q\n%q", out, again)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8: %q", out)
		}
		if !strings.HasSuffix(out, "\n") {
			t.Fatalf("no final line break: %q", out)
		}
	})
}

// FuzzStr: Str and Repr never panic, are deterministic and valid UTF-8;
// str() of a string is the string; repr() of a string is quoted with '
// or ", and of printable ASCII without quotes or backslashes is just
// that text in single quotes.
func FuzzStr(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		v := fuzzValue(data)
		for name, fn := range map[string]func(jsonv.Value) string{"Str": Str, "Repr": Repr} {
			out := fn(v)
			if again := fn(v); again != out {
				t.Fatalf("%s not deterministic: %q then %q", name, out, again)
			}
			if !utf8.ValidString(out) {
				t.Fatalf("%s: invalid UTF-8: %q", name, out)
			}
		}
		s, ok := v.Str()
		if !ok {
			return
		}
		if utf8.ValidString(s) && Str(v) != s {
			t.Fatalf("Str of a string changed it: %q -> %q", s, Str(v))
		}
		r := Repr(v)
		if len(r) < 2 || r[0] != r[len(r)-1] || (r[0] != '\'' && r[0] != '"') {
			t.Fatalf("Repr(%q) = %q is not quoted", s, r)
		}
		plain := true
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e || c == '\'' || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain && r != "'"+s+"'" {
			t.Fatalf("Repr(%q) = %q", s, r)
		}
	})
}
