package pyfmt

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// instructionDoc is testdata/instruction.json: a typical instruction
// document as the envelope hands it to MinimalYAML (Guidance, Instruction,
// Context, Tools and ResponseFormat sections; ADR-0006 "Instruction
// rendering"), about 2 KB of JSON. Its Python rendering is in the goldens.
func instructionDoc(b *testing.B) (jsonv.Value, int) {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "instruction.json"))
	if err != nil {
		b.Fatal(err)
	}
	v, err := jsonv.Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	return v, len(data)
}

// BenchmarkMinimalYAML renders a typical instruction document, as every
// ToChatMessages does for each instruction of a branch.
func BenchmarkMinimalYAML(b *testing.B) {
	v, size := instructionDoc(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var out string
	for b.Loop() {
		out = MinimalYAML(v)
	}
	if out == "" {
		b.Fatal("empty output")
	}
}

// BenchmarkStr renders the same document with str(), as generic content.
func BenchmarkStr(b *testing.B) {
	v, size := instructionDoc(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		_ = Str(v)
	}
}
