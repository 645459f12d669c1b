package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
)

// DefaultSystemMessage is SystemContent's default system_message (ADR-0006 D2).
const DefaultSystemMessage = "You are a helpful AI assistant. Let's think step by step."

// SystemContent is a System message's content (ADR-0006 D2).
type SystemContent struct {
	// SystemMessage is the policy text.
	SystemMessage string
	// Value, when not nil, is a stored system_message that is not text
	// (null included): LionAGI's from_dict keeps any value, and such a
	// System does not render (its chat_msg is None). SystemMessage is then
	// empty. Only a load makes one; the factory takes text.
	Value *jsonv.Value
	// SystemDatetime is rendered as "System Time: ..." when truthy. Null means
	// none. A true given on input has already become the current UTC minute
	// (docs/design.md#system-datetime: Python's isoformat(timespec="minutes")); other JSON values
	// are kept as LionAGI keeps them (the vectors keep an int).
	SystemDatetime jsonv.Value
}

// Kind returns KindSystem.
func (*SystemContent) Kind() Kind { return KindSystem }

// Dict returns {system_message, system_datetime?}; a null system_message is
// left out, as LionAGI's to_dict leaves out None (none_as_sentinel).
func (c *SystemContent) Dict() jsonv.Value { return c.dict(false) }

// storedDict keeps a null system_message, which from_dict reads back as
// None (not as the default text it reads for a missing key).
func (c *SystemContent) storedDict() jsonv.Value { return c.dict(true) }

func (c *SystemContent) dict(keepNull bool) jsonv.Value {
	var b dictBuilder
	switch {
	case c.Value == nil:
		b.add("system_message", jsonv.StringValue(c.SystemMessage))
	case !c.Value.IsNull() || keepNull:
		b.add("system_message", *c.Value)
	}
	if !c.SystemDatetime.IsNull() {
		b.add("system_datetime", c.SystemDatetime)
	}
	return b.value()
}

// Render joins the optional "System Time: ..." line and the message with a
// blank line (ADR-0006 D2).
// A system_message that is not text fails, as LionAGI's "\n\n".join
// raises for it.
func (c *SystemContent) Render() (Rendered, error) {
	if c.Value != nil {
		item := 0
		if c.SystemDatetime.Truthy() {
			item = 1
		}
		return Rendered{}, fieldErr("system_message", "sequence item %d: expected str instance, %s found", item, pyTypeName(*c.Value))
	}
	if !c.SystemDatetime.Truthy() {
		return Rendered{Text: c.SystemMessage}, nil
	}
	return Rendered{Text: "System Time: " + pyfmt.Str(c.SystemDatetime) + "\n\n" + c.SystemMessage}, nil
}

// SystemDatetimeNow returns the current UTC time at minute precision as
// LionAGI writes it for system_datetime=True ("2024-01-01T12:00+00:00").
func SystemDatetimeNow() string {
	return nowFunc().UTC().Format("2006-01-02T15:04") + "+00:00"
}

func systemFromDict(d jsonv.Value) (Content, error) {
	c := &SystemContent{SystemMessage: DefaultSystemMessage}
	if v, ok := d.Get("system_message"); ok {
		s, isStr := v.Str()
		if !isStr {
			// Kept as LionAGI keeps it; it does not render (Render).
			c.SystemMessage, c.Value = "", &v
		} else {
			c.SystemMessage = s
		}
	}
	if v, ok := d.Get("system_datetime"); ok {
		switch b, isBool := v.Bool(); {
		case isBool && b:
			c.SystemDatetime = jsonv.StringValue(SystemDatetimeNow())
		case isBool, v.IsNull():
			c.SystemDatetime = jsonv.NullValue()
		default:
			c.SystemDatetime = v
		}
	}
	return c, nil
}

// pyTypeName is the name of the Python type json.loads gives for v.
func pyTypeName(v jsonv.Value) string {
	switch v.Kind() {
	case jsonv.Null:
		return "NoneType"
	case jsonv.Bool:
		return "bool"
	case jsonv.Number:
		if v.IsInteger() {
			return "int"
		}
		return "float"
	case jsonv.String:
		return "str"
	case jsonv.Array:
		return "list"
	}
	return "dict"
}
