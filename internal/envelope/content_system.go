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
	// SystemDatetime is rendered as "System Time: ..." when truthy. Null means
	// none. A true given on input has already become the current UTC minute
	// (docs/design.md#system-datetime: Python's isoformat(timespec="minutes")); other JSON values
	// are kept as LionAGI keeps them (the vectors keep an int).
	SystemDatetime jsonv.Value
}

// Kind returns KindSystem.
func (*SystemContent) Kind() Kind { return KindSystem }

// Dict returns {system_message, system_datetime?}.
func (c *SystemContent) Dict() jsonv.Value {
	var b dictBuilder
	b.add("system_message", jsonv.StringValue(c.SystemMessage))
	if !c.SystemDatetime.IsNull() {
		b.add("system_datetime", c.SystemDatetime)
	}
	return b.value()
}

// Render joins the optional "System Time: ..." line and the message with a
// blank line (ADR-0006 D2).
func (c *SystemContent) Render() (Rendered, error) {
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
			// LionAGI keeps a non-text system_message and then fails to render
			// it ("sequence item 0: expected str instance"); a service that
			// must always render what it stores rejects it up front.
			return nil, fieldErr("system_message", "must be a string, got %s", v.Kind())
		}
		c.SystemMessage = s
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
