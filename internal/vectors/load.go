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

// Locate returns the path of the vector file: $HISTORYD_VECTORS (a file or
// a directory), else shared/vectors beside the repository root. It returns
// the places it looked when none exists.
func Locate() (string, []string) {
	var looked []string
	if env := os.Getenv("HISTORYD_VECTORS"); env != "" {
		p := env
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, FileName)
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		looked = append(looked, p+" ($HISTORYD_VECTORS)")
	}
	_, self, _, _ := runtime.Caller(0) // .../internal/vectors/load.go
	root := filepath.Dir(filepath.Dir(filepath.Dir(self)))
	p := filepath.Join(filepath.Dir(root), "shared", "vectors", FileName)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", append(looked, p)
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

// ForTest loads the records or skips the test, saying where it looked, when
// the file is absent (a clone without shared/ beside it; CI always has it).
func ForTest(tb testing.TB) []Record {
	tb.Helper()
	path, looked := Locate()
	if path == "" {
		tb.Skipf("LionAGI vectors not found; looked in %v (set HISTORYD_VECTORS)", looked)
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
