package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
)

// ActionRequestContent is an ActionRequest's content (ADR-0006 D2).
type ActionRequestContent struct {
	// Function is the function name.
	Function string
	// Arguments is a JSON object, or what from_dict's reading of arguments
	// given as text left that is not one: [] ("[]"), "" or null ("[null]",
	// LionAGI's None, which to_dict leaves out). See NormalizeArguments.
	Arguments jsonv.Value
	// ActionResponseID is the reciprocal id of the response, once one exists.
	ActionResponseID *string
}

// Kind returns KindActionRequest.
func (*ActionRequestContent) Kind() Kind { return KindActionRequest }

// Dict returns {function, arguments, action_response_id?}; null arguments
// are left out (LionAGI's to_dict leaves out None).
func (c *ActionRequestContent) Dict() jsonv.Value { return c.dict(c.Arguments) }

// storedDict writes arguments that are not an object as the text from_dict
// reads back as them, "[<the value>]" (its first item): read as they are, []
// and "" would become {} and a missing key {} too.
func (c *ActionRequestContent) storedDict() jsonv.Value {
	if c.Arguments.Kind() == jsonv.Object {
		return c.Dict()
	}
	return c.dict(ArgumentsText(c.Arguments))
}

// ArgumentsText is the argument text from_dict reads back as v, a value
// that is not an object: v's JSON in a list, which its fuzzy rule unwraps
// (the form the stores keep such arguments in, and a pre-built message sent
// back is given).
func ArgumentsText(v jsonv.Value) jsonv.Value {
	return jsonv.StringValue("[" + string(jsonv.Marshal(v)) + "]")
}

// IsStoredOnlyArguments reports the ActionRequest arguments that are not an
// object: [], null and "", which from_dict makes only of the text "[]",
// "[null]" and "[\"\"]" (read as they are, it would make them {}).
func IsStoredOnlyArguments(v jsonv.Value) bool {
	switch v.Kind() {
	case jsonv.Null:
		return true
	case jsonv.Array:
		return v.Len() == 0
	case jsonv.String:
		s, _ := v.Str()
		return s == ""
	}
	return false
}

func (c *ActionRequestContent) dict(args jsonv.Value) jsonv.Value {
	var b dictBuilder
	b.add("function", jsonv.StringValue(c.Function))
	if !args.IsNull() {
		b.add("arguments", args)
	}
	if c.ActionResponseID != nil {
		b.add("action_response_id", jsonv.StringValue(*c.ActionResponseID))
	}
	return b.value()
}

// Render writes Function and Arguments through the minimal-YAML renderer.
func (c *ActionRequestContent) Render() (Rendered, error) { return c.renderWithin(0) }

func (c *ActionRequestContent) renderWithin(limit int) (Rendered, error) {
	doc := jsonv.ObjectValue(
		jsonv.Member{Key: "Function", Value: jsonv.StringValue(c.Function)},
		jsonv.Member{Key: "Arguments", Value: c.Arguments},
	)
	text, err := minimalYAMLText(doc, limit)
	if err != nil {
		return Rendered{}, err
	}
	return Rendered{Text: text}, nil
}

// RenderCompact is LionAGI's render_compact: the call as
// "function(k='text', n=3)" for round summaries.
func (c *ActionRequestContent) RenderCompact() string {
	fn := c.Function
	if fn == "" {
		fn = "unknown"
	}
	out := fn + "("
	for i, m := range objectOrEmpty(c.Arguments).Members() {
		if i > 0 {
			out += ", "
		}
		if m.Value.Kind() == jsonv.String {
			out += m.Key + "=" + pyfmt.Repr(m.Value)
		} else {
			out += m.Key + "=" + pyfmt.Str(m.Value)
		}
	}
	return out + ")"
}

// IsResponded reports whether a response has been linked (ADR-0006 D2).
func (c *ActionRequestContent) IsResponded() bool { return c.ActionResponseID != nil }

// ActionResponseContent is an ActionResponse's content (ADR-0006 D2).
// LionAGI's from_dict checks none of it, so a loaded one may hold any
// function and arguments.
type ActionResponseContent struct {
	// Function is the function name, copied from the request.
	Function string
	// FunctionValue, when not nil, is a loaded function that is not text
	// (null included: LionAGI's None, which to_dict leaves out); Function is
	// then empty.
	FunctionValue *jsonv.Value
	// Arguments is the request's arguments as they were copied, or any value
	// a loaded message holds; null is LionAGI's None, which to_dict leaves out.
	Arguments jsonv.Value
	// Output is the function's result; null when none.
	Output jsonv.Value
	// ActionRequestID is the reciprocal id of the request.
	ActionRequestID *string
	// Error is the failure message; nil on success. LionAGI 0.27 drops it on
	// every round trip; historyd keeps it (the vectors' "differs" records).
	Error *string
}

// Kind returns KindActionResponse.
func (*ActionResponseContent) Kind() Kind { return KindActionResponse }

// Dict returns {function, arguments, output?, action_request_id?, error?};
// a null function or arguments is left out, as LionAGI's to_dict leaves out
// None.
func (c *ActionResponseContent) Dict() jsonv.Value { return c.dict(false) }

// storedDict keeps a null function and null arguments, which from_dict reads
// back as None (not as the "" and {} it reads for missing keys).
func (c *ActionResponseContent) storedDict() jsonv.Value { return c.dict(true) }

// function is the function as LionAGI holds it.
func (c *ActionResponseContent) function() jsonv.Value {
	if c.FunctionValue != nil {
		return *c.FunctionValue
	}
	return jsonv.StringValue(c.Function)
}

func (c *ActionResponseContent) dict(keepNull bool) jsonv.Value {
	var b dictBuilder
	if fn := c.function(); !fn.IsNull() || keepNull {
		b.add("function", fn)
	}
	if !c.Arguments.IsNull() || keepNull {
		b.add("arguments", c.Arguments)
	}
	if !c.Output.IsNull() {
		b.add("output", c.Output)
	}
	if c.ActionRequestID != nil {
		b.add("action_request_id", jsonv.StringValue(*c.ActionRequestID))
	}
	if c.Error != nil {
		b.add("error", jsonv.StringValue(*c.Error))
	}
	return b.value()
}

// Render writes Function, Arguments and Output through the minimal-YAML
// renderer (the error is not part of the prompt, as in LionAGI).
func (c *ActionResponseContent) Render() (Rendered, error) { return c.renderWithin(0) }

func (c *ActionResponseContent) renderWithin(limit int) (Rendered, error) {
	doc := jsonv.ObjectValue(
		jsonv.Member{Key: "Function", Value: c.function()},
		jsonv.Member{Key: "Arguments", Value: c.Arguments},
		jsonv.Member{Key: "Output", Value: c.Output},
	)
	text, err := minimalYAMLText(doc, limit)
	if err != nil {
		return Rendered{}, err
	}
	return Rendered{Text: text}, nil
}

// Success reports error is None (ADR-0006 D2: "success is exactly error is
// None").
func (c *ActionResponseContent) Success() bool { return c.Error == nil }

// RenderSummary is LionAGI's render_summary: "error: <message>" on failure
// ("unknown" for an empty message), "ok" for a successful null output, text
// as is, objects and lists as minimal YAML, anything else as Python's str().
func (c *ActionResponseContent) RenderSummary() string {
	if c.Error != nil {
		if *c.Error == "" {
			return "error: unknown"
		}
		return "error: " + *c.Error
	}
	switch c.Output.Kind() {
	case jsonv.Null:
		return "ok"
	case jsonv.String:
		s, _ := c.Output.Str()
		return s
	case jsonv.Object, jsonv.Array:
		return pyfmt.MinimalYAML(c.Output)
	}
	return pyfmt.Str(c.Output)
}

func objectOrEmpty(v jsonv.Value) jsonv.Value {
	if v.Kind() != jsonv.Object {
		return jsonv.ObjectValue()
	}
	return v
}

// actionRequestFromDict is ActionRequestContent.from_dict: the legacy
// {"action_request": {...}} nesting is unwrapped, the function must be text,
// the arguments normalised (NormalizeArguments), action_response_id kept as
// text.
func actionRequestFromDict(d jsonv.Value) (Content, error) {
	src := d
	if inner, ok := d.Get("action_request"); ok {
		if inner.Kind() != jsonv.Object {
			return nil, fieldErr("action_request", "must be a JSON object, got %s", inner.Kind())
		}
		src = inner
	}
	fn, args, err := functionAndArguments(src)
	if err != nil {
		return nil, err
	}
	c := &ActionRequestContent{Function: fn, Arguments: args}
	if c.ActionResponseID, err = reciprocalID(d, "action_response_id"); err != nil {
		return nil, err
	}
	return c, nil
}

// actionResponseFromDict is ActionResponseContent.from_dict, plus `error`,
// which historyd keeps (ADR-0006 D2): function (default "") and arguments
// (default {}) are kept as they are, unchecked, as LionAGI keeps them.
func actionResponseFromDict(d jsonv.Value) (Content, error) {
	src := d
	if inner, ok := d.Get("action_response"); ok {
		if inner.Kind() != jsonv.Object {
			return nil, fieldErr("action_response", "must be a JSON object, got %s", inner.Kind())
		}
		src = inner
	}
	c := &ActionResponseContent{Arguments: jsonv.ObjectValue()}
	if v, ok := src.Get("function"); ok {
		if s, isStr := v.Str(); isStr {
			c.Function = s
		} else {
			c.FunctionValue = &v
		}
	}
	if v, ok := src.Get("arguments"); ok {
		c.Arguments = v
	}
	var err error
	c.Output, _ = src.Get("output")
	if c.ActionRequestID, err = reciprocalID(d, "action_request_id"); err != nil {
		return nil, err
	}
	if v, ok := d.Get("error"); ok {
		if c.Error, err = optString("error", v); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func functionAndArguments(src jsonv.Value) (string, jsonv.Value, error) {
	fn := ""
	if v, ok := src.Get("function"); ok {
		s, isStr := v.Str()
		if !isStr {
			return "", jsonv.Value{}, fieldErr("function", "Function must be a string or callable, got %s", v.Kind())
		}
		fn = s
	}
	args := jsonv.ObjectValue()
	if v, ok := src.Get("arguments"); ok {
		var err error
		if args, err = NormalizeArguments(v); err != nil {
			return "", jsonv.Value{}, err
		}
	}
	return fn, args, nil
}

// NormalizeArguments is ActionRequestContent.from_dict's argument rule,
// to_dict(arguments, fuzzy_parse=True) then the first item of a non-empty
// list (lionagi/protocols/messages/action_request.py, lionagi/ln/fuzzy/
// _to_dict.py, 669ea9b5): an object is kept; null, [] (enumerated: {}) and
// "" are {}; other text is fuzzy JSON, which must be an object or a list, and
// a list gives its first item, an empty one stays []. What it returns is an
// object, or [], "" or null from text.
//
// historyd refuses two things LionAGI takes (docs/decisions/0012): a
// non-empty list, which LionAGI turns into a dict keyed by the integers 0,
// 1, ... that it cannot write as JSON; and text whose list starts with a
// number, a bool, non-empty text or a non-empty list, which LionAGI keeps
// and writes out but then cannot read back. A history holding either could
// not be exported and imported again.
func NormalizeArguments(v jsonv.Value) (jsonv.Value, error) {
	switch v.Kind() {
	case jsonv.Object:
		return v, nil
	case jsonv.Null:
		return jsonv.ObjectValue(), nil
	case jsonv.Array:
		if v.Len() == 0 {
			return jsonv.ObjectValue(), nil
		}
		return jsonv.Value{}, fieldErr("arguments", "Arguments must be a dictionary: a list would become a dict keyed by the integers 0, 1, ..., which LionAGI cannot write as JSON")
	case jsonv.String:
		s, _ := v.Str()
		if s == "" {
			return jsonv.ObjectValue(), nil
		}
		parsed, err := fuzzyParseJSON(s)
		if err != nil {
			return jsonv.Value{}, fieldErr("arguments", "Arguments must be a dictionary: %v", err)
		}
		switch parsed.Kind() {
		case jsonv.Object:
			return parsed, nil
		case jsonv.Array:
			if parsed.Len() == 0 {
				return parsed, nil
			}
			first := parsed.Elems()[0]
			if first.Kind() == jsonv.Object || isEmptyValue(first) {
				return first, nil
			}
			return jsonv.Value{}, fieldErr("arguments", "Arguments must be a dictionary: the list's first item is JSON %s, which LionAGI would keep but could not read back", first.Kind())
		}
		return jsonv.Value{}, fieldErr("arguments", "Arguments must be a dictionary, got JSON %s", parsed.Kind())
	}
	return jsonv.Value{}, fieldErr("arguments", "Arguments must be a dictionary, got %s", v.Kind())
}

// reciprocalID reads action_request_id / action_response_id: a truthy value
// becomes its text (LionAGI's str(value)), a falsy one is kept as given when
// it is text ("" stays "", as the vectors show) and dropped otherwise.
func reciprocalID(d jsonv.Value, key string) (*string, error) {
	v, ok := d.Get(key)
	if !ok {
		return nil, nil
	}
	switch v.Kind() {
	case jsonv.Null:
		return nil, nil
	case jsonv.String:
		s, _ := v.Str()
		return &s, nil
	case jsonv.Number:
		if !v.Truthy() {
			return nil, fieldErr(key, "must be a string, got %s", v.Literal())
		}
		s := pyfmt.Str(v)
		return &s, nil
	}
	return nil, fieldErr(key, "must be a string, got %s", v.Kind())
}
