package vectors

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// FileName is the vector file historyd conforms to.
const FileName = "lionagi-0.27.0.jsonl"

// Record is one reference record.
type Record struct {
	Line       int         // 1-based line in the file
	Group      string      // e.g. "to_dict", "manager"
	Name       string      // what was done, in words
	Op         string      // the operation (see the README's table)
	Input      jsonv.Value // the operation's input
	Expect     string      // "match" or "differs"
	Output     jsonv.Value // the recorded output (null when an error was recorded)
	HasOutput  bool        // whether "output" is present
	Error      jsonv.Value // {type, message} when LionAGI raised
	HasError   bool        // whether "error" is present
	Reason     string      // for "differs": what LionAGI loses
	Historyd   jsonv.Value // for "differs": what historyd must produce, when given
	HasHD      bool        // whether historyd_output is present
	PythonOnly jsonv.Value // true, or a list of step descriptions left out
	Raw        jsonv.Value // the whole record
}

// IsPythonOnly reports a record whose input only Python can express
// (python_only: true): it is counted, never replayed.
func (r Record) IsPythonOnly() bool {
	b, ok := r.PythonOnly.Bool()
	return ok && b
}

// Want returns what historyd must produce: historyd_output for a "differs"
// record that gives one, else output.
func (r Record) Want() jsonv.Value {
	if r.Expect == "differs" && r.HasHD {
		return r.Historyd
	}
	return r.Output
}

// Dir is the folder, relative to the repository root, that holds the
// vector file and its README (where it comes from, how to refresh it).
const Dir = "testdata/lionagi-0.27.0"

// Locate returns the path of the vector file: $HISTORYD_VECTORS (a file or
// a directory) when set, else the repository's own copy under Dir. It
// returns the place it looked when the file is not there.
//
// An override that names nothing is an error, not a fall-back to the copy:
// whoever sets it means to test that recording.
func Locate() (string, []string) {
	p := repoCopy()
	if env := os.Getenv("HISTORYD_VECTORS"); env != "" {
		p = env
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, FileName)
		}
		if _, err := os.Stat(p); err != nil {
			return "", []string{p + " ($HISTORYD_VECTORS)"}
		}
		return p, nil
	}
	if _, err := os.Stat(p); err != nil {
		return "", []string{p}
	}
	return p, nil
}

// repoCopy is the vector file in this repository, found from this source
// file's own path so that any package's test finds it.
func repoCopy() string {
	_, self, _, _ := runtime.Caller(0) // .../internal/vectors/load.go
	root := filepath.Dir(filepath.Dir(filepath.Dir(self)))
	return filepath.Join(root, filepath.FromSlash(Dir), FileName)
}

// Load reads every record of the file at path.
func Load(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		v, err := jsonv.Parse(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		r := Record{Line: line, Raw: v}
		str := func(k string) string { x, _ := v.Get(k); s, _ := x.Str(); return s }
		r.Group, r.Name, r.Op, r.Expect, r.Reason = str("group"), str("name"), str("op"), str("expect"), str("reason")
		r.Input, _ = v.Get("input")
		r.Output, r.HasOutput = v.Get("output")
		r.Error, r.HasError = v.Get("error")
		r.Historyd, r.HasHD = v.Get("historyd_output")
		r.PythonOnly, _ = v.Get("python_only")
		out = append(out, r)
	}
	return out, sc.Err()
}

// ForTest loads the records or fails the test, saying where it looked. The
// file is part of the repository, so a missing file is a broken checkout
// (or a wrong $HISTORYD_VECTORS), never a reason to skip.
func ForTest(tb testing.TB) []Record {
	tb.Helper()
	path, looked := Locate()
	if path == "" {
		tb.Fatalf("LionAGI vectors not found; looked in %v (the repository's copy is %s/%s; $HISTORYD_VECTORS overrides it)", looked, Dir, FileName)
	}
	recs, err := Load(path)
	if err != nil {
		tb.Fatalf("loading vectors: %v", err)
	}
	return recs
}

// Tally counts conformance outcomes for the one-line summary the issues ask
// for.
type Tally struct {
	Matched, Differ, PythonOnly, Failed int
}

// String is "vectors: N matched, D differ as recorded, P python-only, F failed".
func (t Tally) String() string {
	return fmt.Sprintf("vectors: %d matched, %d differ as recorded, %d python-only, %d failed",
		t.Matched, t.Differ, t.PythonOnly, t.Failed)
}
