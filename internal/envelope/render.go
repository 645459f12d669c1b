package envelope

import (
	"strings"
	"unicode"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Rendered is what a model sees of a message (ADR-0006 D1 "rendered"):
// either text, or, for an instruction with images, a list of parts.
type Rendered struct {
	// Text is the rendered text when Parts is nil.
	Text string
	// Parts is the provider-neutral part list: one text part, then one
	// image_url part per image (ADR-0006 D2).
	Parts []ContentPart
	// Value, when not nil, is a rendering that is not text (an
	// AssistantResponse holding a non-string value renders as that value).
	Value *jsonv.Value
}

// ContentPart is one part of a multi-part rendering.
type ContentPart struct {
	// Type is "text" or "image_url".
	Type string
	// Text is the text of a "text" part.
	Text string
	// ImageURL is the URL (or data URI) of an "image_url" part.
	ImageURL string
	// Detail is the image detail of an "image_url" part.
	Detail string
}

// IsParts reports whether the rendering is a part list.
func (r Rendered) IsParts() bool { return r.Parts != nil }

// JSON returns the rendering as LionAGI writes it: a string, or the list of
// {"type":"text","text":...} and {"type":"image_url","image_url":{"url",
// "detail"}} parts.
func (r Rendered) JSON() jsonv.Value {
	if r.Value != nil {
		return *r.Value
	}
	if r.Parts == nil {
		return jsonv.StringValue(r.Text)
	}
	parts := make([]jsonv.Value, len(r.Parts))
	for i, p := range r.Parts {
		if p.Type == "image_url" {
			parts[i] = jsonv.ObjectValue(
				jsonv.Member{Key: "type", Value: jsonv.StringValue("image_url")},
				jsonv.Member{Key: "image_url", Value: jsonv.ObjectValue(
					jsonv.Member{Key: "url", Value: jsonv.StringValue(p.ImageURL)},
					jsonv.Member{Key: "detail", Value: jsonv.StringValue(p.Detail)},
				)},
			)
			continue
		}
		parts[i] = jsonv.ObjectValue(
			jsonv.Member{Key: "type", Value: jsonv.StringValue(p.Type)},
			jsonv.Member{Key: "text", Value: jsonv.StringValue(p.Text)},
		)
	}
	return jsonv.ArrayValue(parts...)
}

// ChatMessage is the chat projection of a message (ADR-0006 D1 chat_msg):
// {"role": <role>, "content": <rendered>}.
type ChatMessage struct {
	Role    Role
	Content Rendered
}

// JSON returns {"role", "content"} as LionAGI's chat_msg.
func (c ChatMessage) JSON() jsonv.Value {
	return jsonv.ObjectValue(
		jsonv.Member{Key: "role", Value: jsonv.StringValue(string(c.Role))},
		jsonv.Member{Key: "content", Value: c.Content.JSON()},
	)
}

// trimPythonWhitespace is Python's str.strip(): it removes the characters
// str.isspace() accepts from both ends (the ASCII ones, the \x1c-\x1f
// separators, \x85 and Unicode spaces).
func trimPythonWhitespace(s string) string {
	return strings.TrimFunc(s, isPythonSpace)
}

func isPythonSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r) || r > 0x7f && unicode.Is(unicode.Zs, r)
}
