package envelope

import (
	"strings"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
)

// GenericContent is the content of the base Message (ADR-0006 D1 "Generic
// content"): any JSON value, kept without coercion. It is what the Exchange
// routes.
type GenericContent struct {
	// Value is the content; null renders as "".
	Value jsonv.Value
	// nested is set when Value is a serialized LionAGI message (its metadata
	// names a lion_class): ADR-0001 D4 rebuilds such a dict as the element,
	// and rendering delegates to it.
	nested *Message
}

// Kind returns KindGeneric.
func (*GenericContent) Kind() Kind { return KindGeneric }

// Dict returns the value; a nested message is written in its canonical
// json-mode shape, as LionAGI serializes an Element inside content.
func (c *GenericContent) Dict() jsonv.Value {
	if c.nested != nil {
		v, _ := c.nested.Encode(ModeJSON, "")
		return v
	}
	return c.Value
}

// storedDict is Dict but for a nested message, which is written in its
// stored form (Message.MarshalJSON's): LionAGI's json-mode shape leaves out
// values it keeps (a null system_message, ...), which Decode would read
// back as defaults, so a store or the Exchange would give back another
// message.
func (c *GenericContent) storedDict() jsonv.Value {
	if c.nested != nil {
		v, _ := c.nested.encode(ModeJSON, "", true)
		return v
	}
	return c.Value
}

// Nested returns the message a serialized-element content was rebuilt
// into, or nil.
func (c *GenericContent) Nested() *Message { return c.nested }

// Render returns "" for null, the nested message's rendering, or Python's
// str() of the value (docs/design.md#generic-content: `{'text': 'hi', 'n': None, 'ok': True}`).
func (c *GenericContent) Render() (Rendered, error) { return c.renderWithin(0) }

func (c *GenericContent) renderWithin(limit int) (Rendered, error) {
	if c.nested != nil {
		return c.nested.RenderWithin(limit)
	}
	if c.Value.IsNull() {
		return Rendered{}, nil
	}
	return Rendered{Text: pyfmt.Str(c.Value)}, nil
}

// newGenericContent keeps v, except that an object whose "metadata" holds a
// lion_class is rebuilt as the element it describes (ADR-0001 D4); a bad
// discriminator there is an error, as in LionAGI.
func newGenericContent(v jsonv.Value) (*GenericContent, error) {
	if v.Kind() != jsonv.Object {
		return &GenericContent{Value: v}, nil
	}
	md, ok := v.Get("metadata")
	if !ok || !mentionsLionClass(md) {
		return &GenericContent{Value: v}, nil
	}
	if md.Kind() != jsonv.Object {
		return nil, fieldErr("content.metadata", "a nested element's metadata must be a JSON object, got %s", md.Kind())
	}
	nested, err := Decode(v)
	if err != nil {
		return nil, withPrefix("content", err)
	}
	return &GenericContent{Value: v, nested: nested}, nil
}

// mentionsLionClass is Python's `"lion_class" in metadata` for a JSON value:
// a key of an object, a substring of a string, an element of a list.
func mentionsLionClass(md jsonv.Value) bool {
	switch md.Kind() {
	case jsonv.Object:
		return md.Has("lion_class")
	case jsonv.String:
		s, _ := md.Str()
		return strings.Contains(s, "lion_class")
	case jsonv.Array:
		for _, e := range md.Elems() {
			if s, ok := e.Str(); ok && s == "lion_class" {
				return true
			}
		}
	}
	return false
}
