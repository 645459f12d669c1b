package envelope_test

import (
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// typicalInstruction is a ~2 KB instruction: guidance, a multi-line task,
// structured context, two tool schemas and a response format.
func typicalInstruction(tb testing.TB) []byte {
	tb.Helper()
	text := `{"id":"00000000-0000-4000-8000-00000000b001","created_at":1700000000.5,
	"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction","trace":"t-1"},
	"content":{"instruction":"Summarize the quarterly report below in five bullet points.\nKeep each bullet under twenty words and cite the section it comes from.",
	"guidance":"Be precise, neutral and brief; prefer numbers over adjectives.",
	"prompt_context":[{"section":"Revenue","text":"Revenue grew 12% year over year to 4.2 billion, driven by subscriptions (up 18%) while hardware fell 3%.","figures":{"revenue":4.2,"growth":0.12,"units":1200000}},
	{"section":"Costs","text":"Operating costs rose 7%; headcount was flat at 10,400; marketing spend fell 5% after the campaign ended.","figures":{"opex":2.9,"headcount":10400}},
	{"section":"Risks","text":"Supply constraints on two components persist into next quarter; a pending regulatory review in the EU could delay the enterprise launch.","figures":{"exposure":0.35}},
	"Outlook: management expects mid-single-digit growth next quarter, citing currency headwinds and a slower enterprise pipeline."],
	"tool_schemas":[{"type":"function","function":{"name":"lookup_section","description":"Return the full text of a report section by name.","parameters":{"type":"object","properties":{"name":{"type":"string","description":"Section name"}},"required":["name"]}}},
	{"type":"function","function":{"name":"compute_ratio","description":"Compute a ratio of two figures, rounded to two decimals.","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}}],
	"response_format":{"bullets":[{"text":"str","section":"str"}],"confidence":0.9}},
	"embedding":null,"sender":"user","recipient":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa","channel":null,"role":"user"}`
	text = strings.Join(strings.Fields(text), " ")
	if len(text) < 1800 || len(text) > 2600 {
		tb.Fatalf("benchmark message is %d bytes, want about 2 KB", len(text))
	}
	return []byte(text)
}

func BenchmarkDecode(b *testing.B) {
	data := typicalInstruction(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := envelope.DecodeJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	m, err := envelope.DecodeJSON(typicalInstruction(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		v, _ := m.Encode(envelope.ModeJSON, "")
		_ = jsonv.Marshal(v)
	}
}

func BenchmarkRender(b *testing.B) {
	m, err := envelope.DecodeJSON(typicalInstruction(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Render(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNormalizeArgumentsHugeInteger: ActionRequest arguments given as text holding a
// 1M-digit integer, within the message size limit. Linear work is milliseconds an op; the
// quadratic big.Int parse it replaced took about 9 s (TestFuzzyParseJSONHugeIntegers).
func BenchmarkNormalizeArgumentsHugeInteger(b *testing.B) {
	text := jsonv.StringValue(`{"a": 1` + strings.Repeat("7", 1<<20) + `}`)
	b.SetBytes(int64(1 << 20))
	for b.Loop() {
		_, _ = envelope.NormalizeArguments(text)
	}
}
