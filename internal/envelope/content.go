package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Content is a message's content: one of *GenericContent, *SystemContent,
// *InstructionContent, *AssistantResponseContent, *ActionRequestContent or
// *ActionResponseContent. Contents are values: once built they are never
// changed in place (Update and Clone build new ones), so a stored message can
// be shared between readers without copying.
type Content interface {
	// Kind returns the message class the content belongs to.
	Kind() Kind
	// Dict returns the content as LionAGI's content.to_dict() writes it (for
	// generic content: the value itself), in LionAGI's field order.
	Dict() jsonv.Value
	// Render returns the text (or text and image parts) a model sees.
	Render() (Rendered, error)
}

// contentFromValue builds the content of a message of kind k from the value
// given as `content` (ADR-0006 D1, "Generic content" and the typed rule: a
// typed class turns null into its empty content, a JSON object through its
// from_dict, and rejects anything else).
func contentFromValue(k Kind, v jsonv.Value) (Content, error) {
	if k == KindGeneric {
		return newGenericContent(v)
	}
	switch v.Kind() {
	case jsonv.Null:
		return emptyContent(k), nil
	case jsonv.Object:
		c, err := ContentFromDict(k, v)
		if err != nil {
			return nil, withPrefix("content", err)
		}
		return c, nil
	}
	return nil, fieldErr("content", "content must be dict or %sContent instance", k)
}

// emptyContent is what a typed class builds from content=None.
func emptyContent(k Kind) Content {
	switch k {
	case KindSystem:
		return &SystemContent{SystemMessage: DefaultSystemMessage}
	case KindInstruction:
		return &InstructionContent{}
	case KindAssistantResponse:
		return &AssistantResponseContent{}
	case KindActionRequest:
		return &ActionRequestContent{Arguments: jsonv.ObjectValue()}
	case KindActionResponse:
		return &ActionResponseContent{Arguments: jsonv.ObjectValue()}
	}
	return &GenericContent{}
}

// ContentFromDict builds typed content from a content dict, as the content
// class's from_dict does (ADR-0006 D2). It never changes d.
func ContentFromDict(k Kind, d jsonv.Value) (Content, error) {
	if d.Kind() != jsonv.Object {
		return nil, fieldErr("", "content must be a JSON object, got %s", d.Kind())
	}
	switch k {
	case KindSystem:
		return systemFromDict(d)
	case KindInstruction:
		return instructionFromDict(d)
	case KindAssistantResponse:
		return assistantFromDict(d)
	case KindActionRequest:
		return actionRequestFromDict(d)
	case KindActionResponse:
		return actionResponseFromDict(d)
	}
	return newGenericContent(d)
}

// dictBuilder collects the members of a content dict in field order.
type dictBuilder []jsonv.Member

func (b *dictBuilder) add(key string, v jsonv.Value) {
	*b = append(*b, jsonv.Member{Key: key, Value: v})
}

func (b dictBuilder) value() jsonv.Value { return jsonv.ObjectValue(b...) }

// isEmptyValue reports the values LionAGI's empty_as_sentinel drops from
// InstructionContent.to_dict: null, "", [] and {}.
func isEmptyValue(v jsonv.Value) bool {
	switch v.Kind() {
	case jsonv.Null:
		return true
	case jsonv.String:
		s, _ := v.Str()
		return s == ""
	case jsonv.Array, jsonv.Object:
		return v.Len() == 0
	}
	return false
}

// asList turns a value into a list the way LionAGI's content classes do:
// null is [], a list is itself, anything else becomes a one-element list.
func asList(v jsonv.Value) []jsonv.Value {
	switch v.Kind() {
	case jsonv.Null:
		return nil
	case jsonv.Array:
		return v.Elems()
	}
	return []jsonv.Value{v}
}

func optString(field string, v jsonv.Value) (*string, error) {
	switch v.Kind() {
	case jsonv.Null:
		return nil, nil
	case jsonv.String:
		s, _ := v.Str()
		return &s, nil
	}
	return nil, fieldErr(field, "must be a string or null, got %s", v.Kind())
}
