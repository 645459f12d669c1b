package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// AssistantResponseContent is an AssistantResponse's content (ADR-0006 D2):
// the normalised display text. The raw provider response lives in the
// message's metadata.model_response.
type AssistantResponseContent struct {
	AssistantResponse string
}

// Kind returns KindAssistantResponse.
func (*AssistantResponseContent) Kind() Kind { return KindAssistantResponse }

// Dict returns {assistant_response}.
func (c *AssistantResponseContent) Dict() jsonv.Value {
	return jsonv.ObjectValue(jsonv.Member{Key: "assistant_response", Value: jsonv.StringValue(c.AssistantResponse)})
}

// Render returns the text as it is.
func (c *AssistantResponseContent) Render() (Rendered, error) {
	return Rendered{Text: c.AssistantResponse}, nil
}

func assistantFromDict(d jsonv.Value) (Content, error) {
	c := &AssistantResponseContent{}
	if v, ok := d.Get("assistant_response"); ok {
		s, isStr := v.Str()
		if !isStr {
			return nil, fieldErr("assistant_response", "must be a string, got %s", v.Kind())
		}
		c.AssistantResponse = s
	}
	return c, nil
}
