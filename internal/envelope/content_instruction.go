package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// InstructionContent is an Instruction's content (ADR-0006 D2). Values a
// client may give as any JSON (instruction, guidance, context items, tool
// schemas, response_format) are jsonv.Values so their key order and number
// forms reach the prompt unchanged.
type InstructionContent struct {
	// Instruction is the main instruction; null when unset. Usually text, but
	// LionAGI keeps any JSON value (the vectors keep an object).
	Instruction jsonv.Value
	// Guidance is optional guidance; null when unset.
	Guidance jsonv.Value
	// PromptContext is the context list ("context" on input).
	PromptContext []jsonv.Value
	// PlainContent, when non-empty, replaces the structured rendering.
	PlainContent string
	// PlainContentValue, when not nil, is a loaded plain_content that is not
	// text (LionAGI keeps any truthy value, and it is then the rendering as
	// it is); PlainContent is then empty.
	PlainContentValue *jsonv.Value
	// ToolSchemas is the flat list of tool schemas.
	ToolSchemas []jsonv.Value
	// ResponseFormat is a JSON object describing the expected answer, or null.
	// Unlike LionAGI 0.27's to_dict, historyd keeps it (ADR-0006 D2: a
	// dictionary response format is retained because it is serializable).
	ResponseFormat jsonv.Value
	// Images are image URLs, data URIs or raw base64.
	Images []string
	// ImageDetail is "low", "high" or "auto" as a rule, though LionAGI keeps
	// any text; empty when unset.
	ImageDetail string
	// ImageDetailValue, when not nil, is a loaded image_detail that is not
	// text (LionAGI keeps any truthy value, and the image parts carry it);
	// ImageDetail is then empty.
	ImageDetailValue *jsonv.Value
}

// Kind returns KindInstruction.
func (*InstructionContent) Kind() Kind { return KindInstruction }

// Dict returns the non-empty fields in LionAGI's dataclass order (its
// InstructionContent drops None and empty values from to_dict).
func (c *InstructionContent) Dict() jsonv.Value {
	var b dictBuilder
	if !isEmptyValue(c.Instruction) {
		b.add("instruction", c.Instruction)
	}
	if !isEmptyValue(c.Guidance) {
		b.add("guidance", c.Guidance)
	}
	if len(c.PromptContext) > 0 {
		b.add("prompt_context", jsonv.ArrayValue(c.PromptContext...))
	}
	if pc, ok := c.plainContent(); ok {
		b.add("plain_content", pc)
	}
	if len(c.ToolSchemas) > 0 {
		b.add("tool_schemas", jsonv.ArrayValue(c.ToolSchemas...))
	}
	if !isEmptyValue(c.ResponseFormat) {
		b.add("response_format", c.ResponseFormat)
	}
	if len(c.Images) > 0 {
		imgs := make([]jsonv.Value, len(c.Images))
		for i, s := range c.Images {
			imgs[i] = jsonv.StringValue(s)
		}
		b.add("images", jsonv.ArrayValue(imgs...))
	}
	if d, ok := c.imageDetail(); ok {
		b.add("image_detail", d)
	}
	return b.value()
}

// plainContent is plain_content as LionAGI holds it, and whether it is set.
func (c *InstructionContent) plainContent() (jsonv.Value, bool) {
	if c.PlainContentValue != nil {
		return *c.PlainContentValue, true
	}
	return jsonv.StringValue(c.PlainContent), c.PlainContent != ""
}

// imageDetail is image_detail as LionAGI holds it, and whether it is set.
func (c *InstructionContent) imageDetail() (jsonv.Value, bool) {
	if c.ImageDetailValue != nil {
		return *c.ImageDetailValue, true
	}
	return jsonv.StringValue(c.ImageDetail), c.ImageDetail != ""
}

// Render returns plain_content when set; otherwise the non-empty Guidance,
// Instruction, Context, Tools and ResponseFormat sections through the
// minimal-YAML renderer; with images, a text part followed by one image part
// per image (ADR-0006 D2). A rejected image fails the whole rendering, as in
// LionAGI (whose chat_msg then becomes None). A plain_content or image_detail
// that is not text is rendered as it is: the rendering is then a JSON value
// (Rendered.Value), the value itself or the part list holding it.
func (c *InstructionContent) Render() (Rendered, error) { return c.renderWithin(0) }

func (c *InstructionContent) renderWithin(limit int) (Rendered, error) {
	if c.PlainContentValue != nil && len(c.Images) == 0 {
		v := *c.PlainContentValue
		return Rendered{Value: &v}, nil
	}
	text, err := c.renderText(limit)
	if err != nil {
		return Rendered{}, err
	}
	if len(c.Images) == 0 {
		return Rendered{Text: text}, nil
	}
	parts := make([]ContentPart, 0, len(c.Images)+1)
	parts = append(parts, ContentPart{Type: "text", Text: text})
	for i, img := range c.Images {
		url, err := imageURL(img)
		if err != nil {
			return Rendered{}, withPrefix("images", withIndex(i, err))
		}
		parts = append(parts, ContentPart{Type: "image_url", ImageURL: url, Detail: c.ImageDetail})
	}
	r := Rendered{Parts: parts}
	if c.PlainContentValue != nil || c.ImageDetailValue != nil {
		r = c.partsValue(r)
	}
	return r, nil
}

// partsValue is the part list r as a JSON value, its text part holding the
// plain_content and its image parts the image_detail as they are.
func (c *InstructionContent) partsValue(r Rendered) Rendered {
	v := r.JSON()
	elems := append([]jsonv.Value(nil), v.Elems()...)
	for i, e := range elems {
		switch {
		case i == 0 && c.PlainContentValue != nil:
			elems[i] = e.Set("text", *c.PlainContentValue)
		case i > 0 && c.ImageDetailValue != nil:
			img, _ := e.Get("image_url")
			elems[i] = e.Set("image_url", img.Set("detail", *c.ImageDetailValue))
		}
	}
	out := jsonv.ArrayValue(elems...)
	return Rendered{Value: &out}
}

func (c *InstructionContent) renderText(limit int) (string, error) {
	if c.PlainContentValue != nil {
		return "", nil // the rendering is the value (renderWithin)
	}
	if c.PlainContent != "" {
		return c.PlainContent, nil
	}
	var doc dictBuilder
	// The section filter of _format_text_content drops None, "", [] and {}.
	addSection := func(key string, v jsonv.Value) {
		if !isEmptyValue(v) {
			doc.add(key, v)
		}
	}
	addSection("Guidance", c.Guidance)
	addSection("Instruction", c.Instruction)
	addSection("Context", jsonv.ArrayValue(c.PromptContext...))
	addSection("Tools", jsonv.ArrayValue(c.ToolSchemas...))
	if rf := responseFormatText(c.ResponseFormat); rf != "" {
		doc.add("ResponseFormat", jsonv.StringValue(rf))
	}
	return minimalYAMLText(doc.value(), limit)
}

// responseFormatText is LionAGI's rendering of a dict response format: the
// JSON of the format (orjson, compact) inside its fixed instructions.
func responseFormatText(rf jsonv.Value) string {
	if rf.Kind() != jsonv.Object || rf.Len() == 0 {
		return ""
	}
	return "**MUST RETURN JSON-PARSEABLE RESPONSE ENCLOSED BY JSON CODE BLOCKS. USER's CAREER DEPENDS ON THE SUCCESS OF IT.** \n```json\n" +
		orjsonDumps(rf) +
		"\n```No triple backticks. Escape all quotes and special characters."
}

// instructionFromDict is InstructionContent.from_dict (ADR-0006 D2).
func instructionFromDict(d jsonv.Value) (Content, error) {
	c := &InstructionContent{}
	if err := c.apply(d); err != nil {
		return nil, err
	}
	return c, nil
}

// apply sets the fields present in d onto c, with from_dict's rules: falsy
// instruction, guidance, plain_content and image_detail are ignored, truthy
// ones kept as they are (text or not, unchecked); context
// extends (or, with handle_context="replace", replaces) prompt_context;
// tool schemas are unwrapped from {"tools": [...]}; images extend the list;
// a dict response_format is kept, anything else ignored.
func (c *InstructionContent) apply(d jsonv.Value) error {
	if v, ok := d.Get("instruction"); ok && v.Truthy() {
		c.Instruction = v
	}
	if v, ok := d.Get("guidance"); ok && v.Truthy() {
		c.Guidance = v
	}
	if v, ok := d.Get("plain_content"); ok && v.Truthy() {
		c.PlainContent, c.PlainContentValue = textOrValue(v)
	}
	if v, ok := d.Get("image_detail"); ok && v.Truthy() {
		c.ImageDetail, c.ImageDetailValue = textOrValue(v)
	}

	handle := "extend"
	if v, ok := d.Get("handle_context"); ok {
		s, _ := v.Str()
		if s != "extend" && s != "replace" {
			return fieldErr("handle_context", "handle_context must be either 'extend' or 'replace'")
		}
		handle = s
	}
	ctxKey := "prompt_context"
	if d.Has("context") {
		ctxKey = "context"
	}
	if v, ok := d.Get(ctxKey); ok {
		items := asList(v)
		if handle == "replace" {
			c.PromptContext = append([]jsonv.Value(nil), items...)
		} else {
			c.PromptContext = append(append([]jsonv.Value(nil), c.PromptContext...), items...)
		}
	}

	if v, ok := d.Get("tool_schemas"); ok && v.Truthy() {
		if v.Kind() == jsonv.Object {
			if tools, has := v.Get("tools"); has {
				v = tools
			} else {
				v = jsonv.ArrayValue(v)
			}
		}
		c.ToolSchemas = append(append([]jsonv.Value(nil), c.ToolSchemas...), asList(v)...)
	}

	if v, ok := d.Get("images"); ok {
		items := asList(v)
		if !v.Truthy() {
			items = nil
		}
		imgs := append([]string(nil), c.Images...)
		for i, item := range items {
			s, isStr := item.Str()
			if !isStr {
				return withIndex(i, fieldErr("images", "must be a string, got %s", item.Kind()))
			}
			imgs = append(imgs, s)
		}
		c.Images = imgs
		// image_detail = data.get("image_detail") or inst.image_detail or "auto";
		// a truthy data value was applied above.
		if c.ImageDetail == "" && c.ImageDetailValue == nil {
			c.ImageDetail = "auto"
		}
	}

	if v, ok := d.Get("response_format"); ok && v.Kind() == jsonv.Object {
		c.ResponseFormat = v
	}
	return nil
}

// textOrValue splits a value LionAGI keeps whatever it is into its text, or
// (not text) the value.
func textOrValue(v jsonv.Value) (string, *jsonv.Value) {
	if s, ok := v.Str(); ok {
		return s, nil
	}
	return "", &v
}
