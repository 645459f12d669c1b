package store

import (
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Factory holds the keyword arguments of LionAGI's
// MessageManager.create_message (ADR-0006 D3 "Factory selection"). A
// jsonv.Value field holding JSON null stands for Python's None (the
// argument was not given); a *envelope.Message field stands for an existing
// message object, which the factory updates instead of creating one.
type Factory struct {
	// Sender and Recipient are null (None: a created message gets an
	// explicit None, as LionAGI's factories pass it) or text.
	Sender, Recipient jsonv.Value
	// Metadata, when truthy, is merged into the message's metadata.extra.
	Metadata jsonv.Value

	// Instruction inputs.
	Instruction    jsonv.Value
	InstructionMsg *envelope.Message
	Context        jsonv.Value
	// HandleContext is "extend" (the default, also when empty) or "replace".
	HandleContext  string
	Guidance       jsonv.Value
	PlainContent   jsonv.Value
	ResponseFormat jsonv.Value
	Images         jsonv.Value
	ImageDetail    jsonv.Value
	ToolSchemas    jsonv.Value

	// System inputs.
	System         jsonv.Value
	SystemMsg      *envelope.Message
	SystemDatetime jsonv.Value

	// Assistant response inputs: text, or a raw provider response that
	// from_response parses (ADR-0006 D2; docs/design.md#branches).
	AssistantResponse jsonv.Value
	AssistantMsg      *envelope.Message
	// AssistantRaw marks AssistantResponse as a raw provider response (the
	// wire's raw_response_json): it goes through AssistantResponse.
	// from_response exactly, a JSON string included, and a falsy recipient
	// becomes "user" (issue 13 item 4). It selects an AssistantResponse
	// whatever the value, null and other falsy ones included: LionAGI's
	// caller hands add_message the message from_response built.
	AssistantRaw bool

	// Action inputs.
	ActionFunction  jsonv.Value
	ActionArguments jsonv.Value
	ActionOutput    jsonv.Value
	// ActionOutputSet marks an action output given as JSON null: LionAGI's
	// None (not given) and a null result are the same value in Python, but
	// a client that sends an action output wants a response.
	ActionOutputSet   bool
	ActionRequestMsg  *envelope.Message
	ActionResponseMsg *envelope.Message
	// ActionError is the error of a new action response (historyd keeps it,
	// ADR-0006 D2 "Action response state"); nil on success.
	ActionError *string
}

// Created is what the factory made.
type Created struct {
	// Message is the created (or updated) message.
	Message *envelope.Message
	// Request is the ActionRequest with its action_response_id set, when a
	// new action response was created (ADR-0006 D2 "New response
	// correlation"); nil otherwise.
	Request *envelope.Message
}

// empty reports whether no factory input is given.
func (f *Factory) empty() bool {
	return f.Sender.IsNull() && f.Recipient.IsNull() && f.Metadata.IsNull() && f.Instruction.IsNull() &&
		f.Context.IsNull() && f.HandleContext == "" && f.Guidance.IsNull() && f.PlainContent.IsNull() &&
		f.ResponseFormat.IsNull() && f.Images.IsNull() && f.ImageDetail.IsNull() && f.ToolSchemas.IsNull() &&
		f.System.IsNull() && f.SystemDatetime.IsNull() && f.AssistantResponse.IsNull() && !f.AssistantRaw &&
		f.ActionFunction.IsNull() && f.ActionArguments.IsNull() && !f.hasOutput() && f.ActionError == nil &&
		f.InstructionMsg == nil && f.SystemMsg == nil && f.AssistantMsg == nil && f.ActionRequestMsg == nil &&
		f.ActionResponseMsg == nil
}

// hasOutput is create_message's `action_output is not None`.
func (f *Factory) hasOutput() bool { return f.ActionOutputSet || !f.ActionOutput.IsNull() }

func truthyOr(v jsonv.Value, m *envelope.Message) bool { return m != nil || v.Truthy() }

// CreateMessage is MessageManager.create_message: it checks that at most
// one of instruction, assistant response, system and a standalone action
// request is truthy ("Only one message type can be added at a time."),
// then builds a System when system is truthy, else an ActionResponse when
// an action output (even a falsy one) or response is given, else an
// ActionRequest for a request or for a function with arguments, else an
// AssistantResponse for a truthy response, else an Instruction. A truthy
// metadata is merged into metadata.extra.
func CreateMessage(f *Factory) (Created, error) {
	if f.messageTypes() > 1 {
		return Created{}, ErrOneMessageType
	}
	var (
		c   Created
		err error
	)
	switch {
	case truthyOr(f.System, f.SystemMsg):
		c.Message, err = CreateSystem(f)
	case f.ActionResponseMsg != nil || f.hasOutput():
		c, err = CreateActionResponse(f)
	case f.ActionRequestMsg != nil || (f.ActionFunction.Truthy() && !f.ActionArguments.IsNull()):
		c.Message, err = CreateActionRequest(f)
	case f.AssistantRaw || truthyOr(f.AssistantResponse, f.AssistantMsg):
		c.Message, err = CreateAssistantResponse(f)
	default:
		c.Message, err = CreateInstruction(f)
	}
	if err != nil {
		return Created{}, err
	}
	if f.Metadata.Truthy() {
		if c.Message, err = withExtraMetadata(c.Message, f.Metadata); err != nil {
			return Created{}, err
		}
	}
	return c, nil
}

// messageTypes counts the message types create_message's inputs select:
// more than one is ErrOneMessageType.
func (f *Factory) messageTypes() int {
	n := 0
	for _, t := range []bool{
		truthyOr(f.Instruction, f.InstructionMsg),
		f.AssistantRaw || truthyOr(f.AssistantResponse, f.AssistantMsg),
		truthyOr(f.System, f.SystemMsg),
		f.ActionRequestMsg != nil && !f.hasOutput() && f.ActionResponseMsg == nil,
	} {
		if t {
			n++
		}
	}
	return n
}

// otherKindInput returns the first content input f gives that a message of
// kind k does not take, "" when there is none (sender, recipient and
// metadata every kind takes).
func (f *Factory) otherKindInput(k envelope.Kind) string {
	for _, in := range []struct {
		kind  envelope.Kind
		name  string
		given bool
	}{
		{envelope.KindInstruction, "instruction", !f.Instruction.IsNull()},
		{envelope.KindInstruction, "context", !f.Context.IsNull()},
		{envelope.KindInstruction, "handle_context", f.HandleContext != ""},
		{envelope.KindInstruction, "guidance", !f.Guidance.IsNull()},
		{envelope.KindInstruction, "plain_content", !f.PlainContent.IsNull()},
		{envelope.KindInstruction, "response_format", !f.ResponseFormat.IsNull()},
		{envelope.KindInstruction, "images", !f.Images.IsNull()},
		{envelope.KindInstruction, "image_detail", !f.ImageDetail.IsNull()},
		{envelope.KindInstruction, "tool_schemas", !f.ToolSchemas.IsNull()},
		{envelope.KindSystem, "system", !f.System.IsNull()},
		{envelope.KindSystem, "system_datetime", !f.SystemDatetime.IsNull()},
		{envelope.KindAssistantResponse, "assistant_response", !f.AssistantResponse.IsNull() || f.AssistantRaw},
		{envelope.KindActionRequest, "action_function", !f.ActionFunction.IsNull()},
		{envelope.KindActionRequest, "action_arguments", !f.ActionArguments.IsNull()},
		{envelope.KindActionResponse, "action_output", f.hasOutput()},
		{envelope.KindActionResponse, "action_error", f.ActionError != nil},
	} {
		if in.given && in.kind != k {
			return in.name
		}
	}
	return ""
}

// withExtraMetadata is `msg.metadata.setdefault("extra", {}).update(md)`.
func withExtraMetadata(m *envelope.Message, md jsonv.Value) (*envelope.Message, error) {
	if md.Kind() != jsonv.Object {
		return nil, fieldErr("metadata", envelope.ErrInvalid, "must be a JSON object, got %s", md.Kind())
	}
	extra, _ := m.Metadata.Get("extra")
	if extra.Kind() != jsonv.Object {
		extra = jsonv.ObjectValue()
	}
	for _, mem := range md.Members() {
		extra = extra.Set(mem.Key, mem.Value)
	}
	cp := m.Copy()
	cp.Metadata = m.Metadata.Set("extra", extra)
	return cp, nil
}

// obj builds a JSON object from the members whose value is not null.
func obj(members ...jsonv.Member) jsonv.Value {
	out := make([]jsonv.Member, 0, len(members))
	for _, m := range members {
		if !m.Value.IsNull() {
			out = append(out, m)
		}
	}
	return jsonv.ObjectValue(out...)
}

func member(k string, v jsonv.Value) jsonv.Member { return jsonv.Member{Key: k, Value: v} }

// newMessage builds a message of kind k from content and the factory's
// participants (null: explicit None).
func newMessage(k envelope.Kind, content jsonv.Value, f *Factory, extra ...jsonv.Member) (*envelope.Message, error) {
	fields := append([]jsonv.Member{
		member("content", content),
		member("sender", f.Sender),
		member("recipient", f.Recipient),
	}, extra...)
	return envelope.New(k, jsonv.ObjectValue(fields...))
}

// CreateSystem is MessageManager.create_system: an existing System is
// updated with the given system_datetime, sender and recipient; otherwise
// a new System gets system_message (when truthy) and system_datetime (when
// given).
func CreateSystem(f *Factory) (*envelope.Message, error) {
	if f.SystemMsg != nil {
		if f.SystemMsg.Kind() != envelope.KindSystem {
			return nil, ErrNotSystem
		}
		return f.SystemMsg.Update(obj(
			member("system_datetime", f.SystemDatetime),
			member("sender", f.Sender),
			member("recipient", f.Recipient)))
	}
	content := jsonv.NullValue()
	if c := obj(member("system_message", truthyValue(f.System)), member("system_datetime", f.SystemDatetime)); c.Len() > 0 {
		content = c
	}
	return newMessage(envelope.KindSystem, content, f)
}

// truthyValue returns v when truthy, else null.
func truthyValue(v jsonv.Value) jsonv.Value {
	if v.Truthy() {
		return v
	}
	return jsonv.NullValue()
}

// CreateInstruction is MessageManager.create_instruction: an existing
// Instruction is updated (its context extended, or replaced with
// handle_context="replace"); otherwise a new one is built from the given
// fields.
func CreateInstruction(f *Factory) (*envelope.Message, error) {
	handle := f.HandleContext
	if handle == "" {
		handle = "extend"
	}
	fields := make([]jsonv.Member, 0, 9) // room for instruction, appended below
	fields = append(fields,
		member("context", f.Context),
		member("handle_context", jsonv.StringValue(handle)),
		member("guidance", f.Guidance),
		member("images", f.Images),
		member("plain_content", f.PlainContent),
		member("image_detail", f.ImageDetail),
		member("response_format", f.ResponseFormat),
		member("tool_schemas", f.ToolSchemas),
	)
	if m := f.InstructionMsg; m != nil {
		ic, ok := m.Content.(*envelope.InstructionContent)
		if !ok {
			return nil, fieldErr("instruction", ErrKindChange, "the message to update is a %s, not an Instruction", m.Kind())
		}
		upd := obj(fields[2:]...)
		if !f.Context.IsNull() {
			items := f.Context.Elems()
			if f.Context.Kind() != jsonv.Array {
				items = []jsonv.Value{f.Context}
			}
			if handle == "extend" {
				items = append(append([]jsonv.Value(nil), ic.PromptContext...), items...)
			}
			upd = upd.Set("context", jsonv.ArrayValue(items...)).Set("handle_context", jsonv.StringValue("replace"))
		}
		for _, p := range []jsonv.Member{member("sender", f.Sender), member("recipient", f.Recipient)} {
			if !p.Value.IsNull() {
				upd = upd.Set(p.Key, p.Value)
			}
		}
		return m.Update(upd)
	}
	// The new Instruction's content: the given fields (the null ones dropped), then instruction,
	// filtered in place (fields is this call's own).
	content := fields[:0]
	for _, m := range append(fields, member("instruction", f.Instruction)) {
		if !m.Value.IsNull() {
			content = append(content, m)
		}
	}
	return newMessage(envelope.KindInstruction, jsonv.ObjectValue(content...), f)
}

// CreateAssistantResponse is MessageManager.create_assistant_response: an
// existing AssistantResponse gets the given sender and recipient;
// otherwise a truthy response becomes the content: text as it is, any other
// JSON value as a raw provider response parsed by from_response, the raw
// value kept in metadata.model_response (ADR-0006 D2; LionAGI 0.27 stores
// such a dict unparsed, a recorded "differs").
func CreateAssistantResponse(f *Factory) (*envelope.Message, error) {
	if m := f.AssistantMsg; m != nil {
		if m.Kind() != envelope.KindAssistantResponse {
			return nil, fieldErr("assistant_response", ErrKindChange, "the message to update is a %s, not an AssistantResponse", m.Kind())
		}
		return m.Update(obj(member("sender", f.Sender), member("recipient", f.Recipient)))
	}
	v := f.AssistantResponse
	if f.AssistantRaw {
		return fromResponse(f)
	}
	if !v.Truthy() {
		return newMessage(envelope.KindAssistantResponse, jsonv.ObjectValue(), f)
	}
	if v.Kind() == jsonv.String {
		return newMessage(envelope.KindAssistantResponse, jsonv.ObjectValue(member("assistant_response", v)), f)
	}
	text, raw, err := envelope.ParseAssistantResponse(v)
	if err != nil {
		return nil, err
	}
	return newMessage(envelope.KindAssistantResponse, jsonv.ObjectValue(member("assistant_response", jsonv.StringValue(text))), f,
		member("metadata", jsonv.ObjectValue(member("model_response", raw))))
}

// fromResponse is LionAGI 0.27's AssistantResponse.from_response (commit
// 669ea9b5): the text parse_assistant_response extracts, the raw value (a
// string too; a list of several stays a list) in metadata.model_response,
// and `recipient or MessageRole.USER`, so an absent, null or empty
// recipient is "user" (issue 13 item 4).
func fromResponse(f *Factory) (*envelope.Message, error) {
	text, raw, err := envelope.ParseAssistantResponse(f.AssistantResponse)
	if err != nil {
		return nil, err
	}
	g := *f
	if !g.Recipient.Truthy() {
		g.Recipient = jsonv.StringValue(string(envelope.RoleUser))
	}
	return newMessage(envelope.KindAssistantResponse, jsonv.ObjectValue(member("assistant_response", jsonv.StringValue(text))), &g,
		member("metadata", jsonv.ObjectValue(member("model_response", raw))))
}

// CreateActionRequest is MessageManager.create_action_request: an existing
// ActionRequest is updated with the given sender, recipient, function and
// arguments; otherwise a new one gets the function and arguments (each when
// truthy).
func CreateActionRequest(f *Factory) (*envelope.Message, error) {
	if m := f.ActionRequestMsg; m != nil && m.Kind() == envelope.KindActionRequest {
		return m.Update(obj(
			member("sender", f.Sender), member("recipient", f.Recipient),
			member("function", f.ActionFunction), member("arguments", f.ActionArguments)))
	}
	return newMessage(envelope.KindActionRequest, obj(
		member("function", truthyValue(f.ActionFunction)),
		member("arguments", truthyValue(f.ActionArguments))), f)
}

// CreateActionResponse is MessageManager.create_action_response: it needs
// an ActionRequest; an existing ActionResponse is updated with the output,
// sender and recipient (no reciprocal link is made, ADR-0006 D2);
// otherwise a new response copies the request's function and arguments,
// stores the request id, and the request gets the response id.
func CreateActionResponse(f *Factory) (Created, error) {
	req := f.ActionRequestMsg
	if req == nil {
		return Created{}, ErrNoActionRequest
	}
	rc, ok := req.Content.(*envelope.ActionRequestContent)
	if !ok {
		return Created{}, &MessageError{Err: ErrNotActionRequest, MessageID: req.ID, Field: "action_request_id"}
	}
	errValue := jsonv.NullValue()
	if f.ActionError != nil {
		errValue = jsonv.StringValue(*f.ActionError)
	}
	if m := f.ActionResponseMsg; m != nil && m.Kind() == envelope.KindActionResponse {
		fields := jsonv.ObjectValue(member("output", f.ActionOutput))
		for _, p := range []jsonv.Member{member("sender", f.Sender), member("recipient", f.Recipient), member("error", errValue)} {
			if !p.Value.IsNull() {
				fields = fields.Set(p.Key, p.Value)
			}
		}
		upd, err := m.Update(fields)
		return Created{Message: upd}, err
	}
	resp, err := newMessage(envelope.KindActionResponse, obj(
		member("function", jsonv.StringValue(rc.Function)),
		member("output", f.ActionOutput),
		member("action_request_id", jsonv.StringValue(req.ID.String())),
		member("error", errValue)).Set("arguments", rc.Arguments), f) // None too: LionAGI passes the request's as they are
	if err != nil {
		return Created{}, err
	}
	updated, err := req.WithActionResponseID(resp.ID)
	if err != nil {
		return Created{}, err
	}
	return Created{Message: resp, Request: updated}, nil
}
