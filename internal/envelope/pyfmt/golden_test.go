package pyfmt

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// The golden files were written by Python 3.11 with PyYAML 6.0.3 and
// orjson 3.8.3 (the versions LionAGI 0.27.0 was recorded with); regenerate
// them with
//
//	python3 internal/envelope/pyfmt/testdata/gen/goldens.py
//
// (see testdata/README.md). The generator checks its mirror of
// minimal_yaml against the LionAGI vectors before writing anything.

// readGolden decodes each line of testdata/name into a new T.
func readGolden[T any](t *testing.T, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("golden file: %v", err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var rec T
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s line %d: %v", name, len(out)+1, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	if len(out) == 0 {
		t.Fatalf("%s is empty", name)
	}
	return out
}

func mustParse(t *testing.T, text string) jsonv.Value {
	t.Helper()
	v, err := jsonv.ParseString(text)
	if err != nil {
		t.Fatalf("golden input %q: %v", text, err)
	}
	return v
}

// failures caps the errors a golden test prints.
type failures struct {
	t *testing.T
	n int
}

func (f *failures) errorf(format string, args ...any) {
	f.t.Helper()
	f.n++
	if f.n <= 20 {
		f.t.Errorf(format, args...)
	}
}

func (f *failures) done(total int) {
	f.t.Helper()
	if f.n > 20 {
		f.t.Errorf("... %d more failures", f.n-20)
	}
	f.t.Logf("%d golden cases, %d failed", total, f.n)
}

// TestGoldenMinimalYAML: minimal_yaml (LionAGI 0.27.0, PyYAML 6.0 emitter
// and resolver) on thousands of scalars, keys and structures.
func TestGoldenMinimalYAML(t *testing.T) {
	type rec struct {
		Input       string `json:"input"`
		DropEmpties bool   `json:"drop_empties"`
		Output      string `json:"output"`
	}
	recs := readGolden[rec](t, "minimal_yaml.jsonl")
	f := failures{t: t}
	for _, r := range recs {
		v := mustParse(t, r.Input)
		got := MinimalYAMLKeepEmpties(v)
		if r.DropEmpties {
			got = MinimalYAML(v)
		}
		if got != r.Output {
			f.errorf("minimal_yaml(%s, drop_empties=%v):\n got %q\nwant %q", r.Input, r.DropEmpties, got, r.Output)
		}
	}
	f.done(len(recs))
}

// TestGoldenStrRepr: Python's str() and repr() of json.loads(input).
func TestGoldenStrRepr(t *testing.T) {
	type rec struct {
		Input string `json:"input"`
		Str   string `json:"str"`
		Repr  string `json:"repr"`
	}
	recs := readGolden[rec](t, "str_repr.jsonl")
	f := failures{t: t}
	for _, r := range recs {
		v := mustParse(t, r.Input)
		if got := Str(v); got != r.Str {
			f.errorf("str(%s):\n got %q\nwant %q", r.Input, got, r.Str)
		}
		if got := Repr(v); got != r.Repr {
			f.errorf("repr(%s):\n got %q\nwant %q", r.Input, got, r.Repr)
		}
	}
	f.done(len(recs))
}

type blockRec struct {
	First rune   `json:"first"`
	Last  rune   `json:"last"`
	Sha   string `json:"sha256"`
	Value string `json:"value"`
	Key   string `json:"key"`
	Pairs string `json:"pairs"`
}

// block returns the code points first..last without the surrogates.
func (r blockRec) block() []rune {
	var rs []rune
	for c := r.First; c <= r.Last; c++ {
		if c < 0xd800 || c > 0xdfff {
			rs = append(rs, c)
		}
	}
	return rs
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:32]
}

// TestGoldenReprBlocks: repr() of every Unicode code point, 256 at a time,
// against Python 3.11 (Unicode 14.0.0 str.isprintable()).
func TestGoldenReprBlocks(t *testing.T) {
	recs := readGolden[blockRec](t, "repr_blocks.jsonl")
	f := failures{t: t}
	for _, r := range recs {
		s := string(r.block())
		if got := digest(Repr(jsonv.StringValue(s))); got != r.Sha {
			f.errorf("repr of U+%04X..U+%04X differs from Python's (Unicode %s)", r.First, r.Last, pyUnicodeVersion)
		}
	}
	f.done(len(recs))
}

// TestGoldenYAMLBlocks: minimal_yaml of every Unicode code point, 256 at a
// time, as a value, in keys and as short list items.
func TestGoldenYAMLBlocks(t *testing.T) {
	recs := readGolden[blockRec](t, "yaml_blocks.jsonl")
	f := failures{t: t}
	for _, r := range recs {
		rs := r.block()
		s := string(rs)
		value := MinimalYAML(jsonv.ObjectValue(jsonv.Member{Key: "k", Value: jsonv.StringValue(s)}))
		if got := digest(value); got != r.Value {
			f.errorf("U+%04X..U+%04X as a value: %q", r.First, r.Last, value)
		}
		cut := min(60, len(rs))
		keys := MinimalYAML(jsonv.ObjectValue(
			jsonv.Member{Key: string(rs[:cut]), Value: jsonv.IntValue(1)},
			jsonv.Member{Key: string(rs[cut:]), Value: jsonv.ArrayValue(jsonv.StringValue(string(rs[:min(3, len(rs))])))},
		))
		if got := digest(keys); got != r.Key {
			f.errorf("U+%04X..U+%04X in keys: %q", r.First, r.Last, keys)
		}
		var items []jsonv.Value
		for i := 0; i < len(rs); i += 2 {
			items = append(items, jsonv.StringValue(string(rs[i:min(i+2, len(rs))])))
		}
		pairs := MinimalYAML(jsonv.ArrayValue(items...))
		if got := digest(pairs); got != r.Pairs {
			f.errorf("U+%04X..U+%04X as pairs: %q", r.First, r.Last, strings.ToValidUTF8(pairs, "?"))
		}
	}
	f.done(len(recs))
}
