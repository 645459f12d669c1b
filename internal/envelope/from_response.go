package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// ParseAssistantResponse extracts the display text from a raw provider
// response (ADR-0006 D2 "Assistant normalization") and returns it with the
// raw value to keep in metadata.model_response. It reads, per item of a
// list (or the value itself): Anthropic-style "content" (text blocks and
// strings), OpenAI chat "choices" (message or delta content), the OpenAI
// Responses "output" (output_text parts of message items), Claude Code's
// "result", and plain strings; fragments are concatenated without a
// delimiter; unknown shapes give "". Text where text must be is checked: a
// non-string fragment is an error, where LionAGI raises TypeError.
func ParseAssistantResponse(resp jsonv.Value) (string, jsonv.Value, error) {
	items := []jsonv.Value{resp}
	if resp.Kind() == jsonv.Array {
		items = resp.Elems()
	}
	var text []byte
	add := func(field string, v jsonv.Value) error {
		s, ok := v.Str()
		if !ok {
			return fieldErr(field, "provider response text must be a string, got %s", v.Kind())
		}
		text = append(text, s...)
		return nil
	}
	for _, item := range items {
		switch item.Kind() {
		case jsonv.String:
			if err := add("response", item); err != nil {
				return "", jsonv.Value{}, err
			}
		case jsonv.Object:
			if err := parseProviderItem(item, add); err != nil {
				return "", jsonv.Value{}, err
			}
		}
	}
	raw := resp
	if resp.Kind() == jsonv.Array && resp.Len() == 1 {
		raw = resp.Elems()[0]
	}
	return string(text), raw, nil
}

func parseProviderItem(item jsonv.Value, add func(string, jsonv.Value) error) error {
	if content, ok := item.Get("content"); ok {
		for _, c := range asListKeepNull(content) {
			switch c.Kind() {
			case jsonv.Object:
				if t, _ := c.Get("type"); t.String() == `"text"` {
					txt, _ := c.Get("text")
					if err := add("response.content.text", txt); err != nil {
						return err
					}
				}
			case jsonv.String:
				if err := add("response.content", c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if choices, ok := item.Get("choices"); ok {
		for _, choice := range asListKeepNull(choices) {
			if choice.Kind() != jsonv.Object {
				continue
			}
			for _, key := range [...]string{"message", "delta"} {
				msg, has := choice.Get(key)
				if !has {
					continue
				}
				if c, _ := msg.Get("content"); c.Truthy() {
					if err := add("response.choices."+key+".content", c); err != nil {
						return err
					}
				}
				break
			}
		}
		return nil
	}
	if output, ok := item.Get("output"); ok {
		for _, out := range asListKeepNull(output) {
			if t, _ := out.Get("type"); out.Kind() != jsonv.Object || t.String() != `"message"` {
				continue
			}
			content, _ := out.Get("content")
			for _, c := range content.Elems() {
				switch c.Kind() {
				case jsonv.Object:
					if t, _ := c.Get("type"); t.String() == `"output_text"` {
						txt, has := c.Get("text")
						if !has {
							txt = jsonv.StringValue("")
						}
						if err := add("response.output.content.text", txt); err != nil {
							return err
						}
					}
				case jsonv.String:
					if err := add("response.output.content", c); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if result, ok := item.Get("result"); ok {
		return add("response.result", result)
	}
	return nil
}

// asListKeepNull is `[x] if not isinstance(x, list) else x`: unlike asList,
// a null becomes a one-element list (whose element matches nothing).
func asListKeepNull(v jsonv.Value) []jsonv.Value {
	if v.Kind() == jsonv.Array {
		return v.Elems()
	}
	return []jsonv.Value{v}
}
