package pyfmt

import (
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// deepList is [[[...[1, 1, ...]...]]]: depth lists around n ones, the
// shape of issue 11's case 1 (each "1" renders at 2*depth columns).
func deepList(t *testing.T, depth, n int) jsonv.Value {
	t.Helper()
	text := strings.Repeat("[", depth) + strings.TrimSuffix(strings.Repeat("1,", n), ",") + strings.Repeat("]", depth)
	v, err := jsonv.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// issue 11 case 1: the renderer stops at the cap instead of writing the
// whole amplified text.
func TestMinimalYAMLWithin(t *testing.T) {
	deepLiteral := jsonv.ArrayValue(jsonv.StringValue(strings.Repeat("x\n", 5000)))
	for range 500 {
		deepLiteral = jsonv.ArrayValue(deepLiteral)
	}
	deepQuoted := jsonv.ArrayValue(jsonv.StringValue(strings.Repeat("x\u2028", 5000))) // single-quoted, a break per line
	for range 500 {
		deepQuoted = jsonv.ArrayValue(deepQuoted)
	}
	tests := []struct {
		name  string
		v     jsonv.Value
		limit int
		fits  bool
	}{
		{"small fits", jsonv.ObjectValue(jsonv.Member{Key: "a", Value: jsonv.IntValue(1)}), 100, true},
		{"no limit", deepList(t, 50, 100), 0, true},
		{"deep list within a large cap", deepList(t, 20, 100), 1 << 20, true},
		{"deep list over the cap", deepList(t, 990, 100_000), 1 << 20, false},
		{"deep literal block over the cap", deepLiteral, 64 << 10, false},
		{"deep single-quoted breaks over the cap", deepQuoted, 64 << 10, false},
	}
	// Exactness: a rendering of exactly the cap fits, one byte less does not.
	for _, v := range []jsonv.Value{deepList(t, 30, 50), deepLiteral, deepQuoted} {
		full := MinimalYAML(v)
		if text, _, ok := MinimalYAMLWithin(v, len(full)); !ok || text != full {
			t.Errorf("a rendering of exactly the cap (%d bytes) did not fit", len(full))
		}
		if _, written, ok := MinimalYAMLWithin(v, len(full)-1); ok || written > len(full)-1 {
			t.Errorf("a rendering one byte over the cap fit (written %d)", written)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, written, ok := MinimalYAMLWithin(tc.v, tc.limit)
			if ok != tc.fits {
				t.Fatalf("ok = %v, want %v (written %d)", ok, tc.fits, written)
			}
			if ok {
				if want := MinimalYAML(tc.v); text != want || written != len(want) {
					t.Fatalf("within the cap the text differs from MinimalYAML (%d vs %d bytes)", len(text), len(want))
				}
				return
			}
			// Stopped: the buffer never passed the cap, and it stopped
			// within one line of it (indentation of 2*depth and a short
			// scalar), not at the start.
			if text != "" || written > tc.limit || written < tc.limit-4096 {
				t.Fatalf("stopped with %d bytes written (text %d bytes), want at most the cap %d, and near it", written, len(text), tc.limit)
			}
		})
	}
}
