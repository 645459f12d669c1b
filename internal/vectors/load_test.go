package vectors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepoCopyIsThere: issue 12, "no LionAGI vector test skips on a fresh clone". The
// conformance tests read the repository's own copy (testdata/lionagi-0.27.0); this pins that it is
// found without $HISTORYD_VECTORS and holds the whole recording its README describes (440 records,
// 16 of them "differs").
func TestRepoCopyIsThere(t *testing.T) {
	t.Setenv("HISTORYD_VECTORS", "")
	path, looked := Locate()
	if path == "" {
		t.Fatalf("repository copy not found; looked in %v", looked)
	}
	if want := filepath.Join(filepath.FromSlash(Dir), FileName); !strings.HasSuffix(path, want) {
		t.Errorf("Locate() = %s, want the repository's %s", path, want)
	}
	recs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	differs := 0
	for _, r := range recs {
		if r.Expect == "differs" {
			differs++
		}
	}
	if len(recs) != 440 || differs != 16 {
		t.Errorf("%s: %d records, %d differs; the README describes 440 and 16", path, len(recs), differs)
	}
}

// TestLocateOverride: $HISTORYD_VECTORS, a directory or the file, wins over the repository's copy,
// and an override that names nothing is reported, not replaced by the copy.
func TestLocateOverride(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, FileName)
	if err := os.WriteFile(file, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nowhere", FileName)
	for _, tc := range []struct {
		name, env, want string
	}{
		{"directory", dir, file},
		{"file", file, file},
		{"missing", missing, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HISTORYD_VECTORS", tc.env)
			got, looked := Locate()
			if got != tc.want {
				t.Errorf("Locate() = %q (looked in %v), want %q", got, looked, tc.want)
			}
			if tc.want == "" && (len(looked) != 1 || looked[0] != missing+" ($HISTORYD_VECTORS)") {
				t.Errorf("looked = %v, want the override named", looked)
			}
		})
	}
}
