//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoClientQuickstart runs examples/quickstart against the real binary and checks what it
// prints, and that its main body is at most 30 lines, blank lines and comments not counted
// (issue 19: "The 30-line program above fits in 30 lines").
func TestGoClientQuickstart(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "examples", "quickstart", "main.go")
	if n := mainBodyLines(t, file); n > 30 {
		t.Errorf("examples/quickstart's main body has %d lines, want at most 30", n)
	}

	p := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*startTimeout) // go run compiles first
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd(), "run", "./examples/quickstart")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HISTORYD_ADDR="+p.addr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run ./examples/quickstart: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	want := `event 1 EVENT_KIND_BRANCH_CREATED
event 2 EVENT_KIND_MESSAGE_ADDED
event 3 EVENT_KIND_MESSAGE_ADDED
system: "You are a careful calculator."
user: "Instruction: What is 30 + 12?\nContext:\n- a: 30\n  b: 12"
assistant: "30 + 12 = 42."
`
	if stdout.String() != want {
		t.Errorf("quickstart printed\n%s\nwant\n%s", stdout.String(), want)
	}
}

// mainBodyLines counts the lines of func main's body in file that hold code: not blank, not only
// a comment, and not the braces that open and close the body.
func mainBodyLines(t *testing.T, file string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "main" || fn.Recv != nil {
			continue
		}
		lines := strings.Split(string(src), "\n")
		first, last := fset.Position(fn.Body.Lbrace).Line, fset.Position(fn.Body.Rbrace).Line
		n := 0
		for _, l := range lines[first : last-1] { // the lines strictly between the braces
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "//") {
				n++
			}
		}
		return n
	}
	t.Fatalf("%s has no func main", file)
	return 0
}
