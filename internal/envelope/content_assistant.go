package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// AssistantResponseContent is an AssistantResponse's content (ADR-0006 D2):
// the normalised display text. The raw provider response lives in the
// message's metadata.model_response.
//
// Value, when not nil, is a stored value that is not a string: LionAGI 0.27's
// add_message(assistant_response=<provider dict>) stores the dict itself,
// and an import keeps such a history as it came (issue 13 item 2); the
// factory never makes one (it extracts the text, ADR-0006 D2). A null
// Value is LionAGI's None: chat_msg carries it, to_dict leaves it out.
type AssistantResponseContent struct {
	AssistantResponse string
	Value             *jsonv.Value
}

// Kind returns KindAssistantResponse.
func (*AssistantResponseContent) Kind() Kind { return KindAssistantResponse }

// Dict returns {assistant_response}; a null value is left out, as
// LionAGI's to_dict leaves out None (MessageContent's none_as_sentinel).
func (c *AssistantResponseContent) Dict() jsonv.Value {
	if c.Value != nil && c.Value.IsNull() {
		return jsonv.ObjectValue()
	}
	return c.storedDict()
}

// storedDict keeps a null value, which from_dict reads back as None (not
// as the "" it reads for a missing key).
func (c *AssistantResponseContent) storedDict() jsonv.Value {
	if c.Value != nil {
		return jsonv.ObjectValue(jsonv.Member{Key: "assistant_response", Value: *c.Value})
	}
	return jsonv.ObjectValue(jsonv.Member{Key: "assistant_response", Value: jsonv.StringValue(c.AssistantResponse)})
}

// Render returns the text as it is; a non-string value renders as itself,
// as LionAGI's rendered property returns it (and chat_msg carries it).
func (c *AssistantResponseContent) Render() (Rendered, error) {
	if c.Value != nil {
		v := *c.Value
		return Rendered{Value: &v}, nil
	}
	return Rendered{Text: c.AssistantResponse}, nil
}

func assistantFromDict(d jsonv.Value) (Content, error) {
	c := &AssistantResponseContent{}
	if v, ok := d.Get("assistant_response"); ok {
		s, isStr := v.Str()
		if !isStr {
			c.Value = &v // kept as it came (issue 13 item 2)
			return c, nil
		}
		c.AssistantResponse = s
	}
	return c, nil
}
