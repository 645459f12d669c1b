package envelope

import (
	"bufio"
	"os"
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
