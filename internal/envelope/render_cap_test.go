package envelope

import (
	"errors"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

func deepContext(t *testing.T, depth, n int) jsonv.Value {
	t.Helper()
	v, err := jsonv.ParseString(strings.Repeat("[", depth) + strings.TrimSuffix(strings.Repeat("1,", n), ",") + strings.Repeat("]", depth))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// issue 11 case 1: a rendering past --max-rendered-bytes stops at the cap
// and takes the render-failure path; one within it is Render's.
func TestRenderWithin(t *testing.T) {
	const limit = 1 << 20
	deep := deepContext(t, 990, 100_000) // ~206 KB of JSON, ~200 MB of YAML
	str := func(s string) jsonv.Value { return jsonv.StringValue(s) }
	tests := []struct {
		name    string
		content Content
		limit   int
		tooBig  bool
		linear  bool // rendered whole, then measured
	}{
		{"instruction within", &InstructionContent{Instruction: str("hi"), PromptContext: []jsonv.Value{deepContext(t, 10, 10)}}, limit, false, false},
		{"instruction nested 990 deep", &InstructionContent{Instruction: str("hi"), PromptContext: []jsonv.Value{deep}}, limit, true, false},
		{"instruction with images, text over", &InstructionContent{Instruction: str("hi"), PromptContext: []jsonv.Value{deep}, Images: []string{"https://x/y.png"}}, limit, true, false},
		{"plain content over", &InstructionContent{PlainContent: strings.Repeat("p", 2000)}, 1000, true, true},
		{"action request over", &ActionRequestContent{Function: "f", Arguments: jsonv.ObjectValue(jsonv.Member{Key: "a", Value: deep})}, limit, true, false},
		{"action response over", &ActionResponseContent{Function: "f", Arguments: jsonv.ObjectValue(), Output: deep}, limit, true, false},
		{"assistant over", &AssistantResponseContent{AssistantResponse: strings.Repeat("a", 2000)}, 1000, true, true},
		{"assistant within", &AssistantResponseContent{AssistantResponse: "a"}, 1000, false, false},
		{"no cap", &InstructionContent{Instruction: str("hi"), PromptContext: []jsonv.Value{deepContext(t, 30, 30)}}, 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Message{Content: tc.content}
			r, err := m.RenderWithin(tc.limit)
			if !tc.tooBig {
				want, werr := m.Render()
				if err != nil || werr != nil || r.Text != want.Text {
					t.Fatalf("RenderWithin = %q, %v; Render = %q, %v", r.Text, err, want.Text, werr)
				}
				return
			}
			var tl *RenderTooLargeError
			if !errors.As(err, &tl) || !errors.Is(err, ErrRender) || !errors.Is(err, ErrRenderTooLarge) {
				t.Fatalf("err = %v, want a *RenderTooLargeError wrapping ErrRender", err)
			}
			// The minimal-YAML renderings stop within a line of the cap, never past
			// it; the linear ones are measured whole.
			if tl.Limit != tc.limit || tl.Bytes < tc.limit-4096 || (tl.Bytes > tc.limit) != tc.linear {
				t.Fatalf("error figures %+v: want the cap %d and a stop at it", tl, tc.limit)
			}
			if r.Text != "" || r.Parts != nil {
				t.Fatalf("a failed rendering carries no text or parts")
			}
			if _, err := m.ChatMsgWithin(tc.limit); !errors.As(err, &tl) {
				t.Fatalf("ChatMsgWithin err = %v", err)
			}
		})
	}
}
