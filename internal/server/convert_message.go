package server

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// messageFromProto converts a wire Message into the domain. It builds the
// LionAGI constructor fields from the proto and hands them to
// envelope.New, so a message that arrives over gRPC obeys exactly the rules
// a LionAGI dict does (ADR-0006 D1/D2). field is the request path of the
// message ("message"), used to name offending fields.
func messageFromProto(field string, pb *historyv1.Message) (*envelope.Message, error) {
	if pb == nil {
		return nil, &FieldError{Field: field, Err: fmt.Errorf("%w: a message is required", envelope.ErrInvalid)}
	}
	kind, content, err := contentFromProto(pb)
	if err != nil {
		return nil, prefixField(field, err)
	}
	var ms []jsonv.Member
	add := func(k string, v jsonv.Value) { ms = append(ms, jsonv.Member{Key: k, Value: v}) }
	if pb.GetId() != "" {
		add("id", jsonv.StringValue(pb.GetId()))
	}
	if pb.CreatedAt != nil {
		f := pb.GetCreatedAt()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &FieldError{Field: field + ".created_at", Err: fmt.Errorf("%w: not a finite number", envelope.ErrInvalid)}
		}
		add("created_at", jsonv.FloatValue(f))
	}
	if pb.GetMetadata() != nil {
		md, err := structToJSON(pb.GetMetadata())
		if err != nil {
			return nil, &FieldError{Field: field + ".metadata", Err: err}
		}
		add("metadata", md)
	}
	if pb.GetEmbedding() != nil {
		vals := make([]jsonv.Value, 0, len(pb.GetEmbedding().GetValues()))
		for _, f := range pb.GetEmbedding().GetValues() {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, &FieldError{Field: field + ".embedding", Err: fmt.Errorf("%w: not a finite number", envelope.ErrInvalid)}
			}
			vals = append(vals, jsonv.FloatValue(f))
		}
		add("embedding", jsonv.ArrayValue(vals...))
	}
	if pb.GetSender() != nil {
		v, err := participantFromProto(pb.GetSender())
		if err != nil {
			return nil, &FieldError{Field: field + ".sender", Err: err}
		}
		add("sender", v)
	}
	if pb.GetRecipient() != nil {
		v, err := participantFromProto(pb.GetRecipient())
		if err != nil {
			return nil, &FieldError{Field: field + ".recipient", Err: err}
		}
		add("recipient", v)
	}
	if pb.Channel != nil {
		add("channel", jsonv.StringValue(pb.GetChannel()))
	}
	add("content", content)
	m, err := envelope.New(kind, jsonv.ObjectValue(ms...))
	if err != nil {
		return nil, prefixField(field, renameContentField(kind, err))
	}
	return m, nil
}

// protoContentNames are the oneof field names of each content kind.
var protoContentNames = map[envelope.Kind]string{
	envelope.KindGeneric: "generic", envelope.KindSystem: "system", envelope.KindInstruction: "instruction",
	envelope.KindAssistantResponse: "assistant_response", envelope.KindActionRequest: "action_request",
	envelope.KindActionResponse: "action_response",
}

// renameContentField turns the LionAGI path "content.x" of a domain error
// into the proto path "instruction.x", so the client is told the field it
// sent.
func renameContentField(kind envelope.Kind, err error) error {
	ef, ok := errors.AsType[*envelope.FieldError](err)
	if !ok || (ef.Field != "content" && !strings.HasPrefix(ef.Field, "content.") && !strings.HasPrefix(ef.Field, "content[")) {
		return err
	}
	cp := *ef
	cp.Field = protoContentNames[kind] + strings.TrimPrefix(ef.Field, "content")
	if f, ok := strings.CutSuffix(cp.Field, ".arguments"); ok {
		cp.Field = f + ".arguments_json" // the wire field that carried them
	}
	return &cp
}

// participantFromProto reads a participant Value: null or a string
// (docs/design.md#participants "Participants are google.protobuf.Value limited to null or
// string").
func participantFromProto(v *structpb.Value) (jsonv.Value, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return jsonv.NullValue(), nil
	case *structpb.Value_StringValue:
		return jsonv.StringValue(k.StringValue), nil
	}
	return jsonv.Value{}, fmt.Errorf("%w: a participant must be null or a string", envelope.ErrInvalid)
}

// contentFromProto returns the message kind and the LionAGI content dict
// the proto's typed content describes.
func contentFromProto(pb *historyv1.Message) (envelope.Kind, jsonv.Value, error) {
	switch c := pb.GetContent().(type) {
	case *historyv1.Message_System:
		d, err := systemDict(c.System)
		return envelope.KindSystem, d, prefixField("system", err)
	case *historyv1.Message_Instruction:
		d, err := instructionDict(c.Instruction)
		return envelope.KindInstruction, d, prefixField("instruction", err)
	case *historyv1.Message_AssistantResponse:
		ac := c.AssistantResponse
		if ac.AssistantResponseJson == nil {
			return envelope.KindAssistantResponse, jsonv.ObjectValue(jsonv.Member{
				Key: "assistant_response", Value: jsonv.StringValue(ac.GetAssistantResponse()),
			}), nil
		}
		// A non-string value (issue 13 item 2): set only then, and alone.
		v, err := nonTextJSON("assistant_response.assistant_response_json", "assistant_response", ac.GetAssistantResponse() != "", ac.GetAssistantResponseJson())
		if err != nil {
			return 0, jsonv.Value{}, err
		}
		return envelope.KindAssistantResponse, jsonv.ObjectValue(jsonv.Member{Key: "assistant_response", Value: v}), nil
	case *historyv1.Message_ActionRequest:
		d, err := actionRequestDict(c.ActionRequest)
		return envelope.KindActionRequest, d, prefixField("action_request", err)
	case *historyv1.Message_ActionResponse:
		d, err := actionResponseDict(c.ActionResponse)
		return envelope.KindActionResponse, d, prefixField("action_response", err)
	case *historyv1.Message_Generic:
		if c.Generic.ContentJson == nil {
			return envelope.KindGeneric, jsonv.NullValue(), nil
		}
		v, err := parseJSONField("generic.content_json", c.Generic.GetContentJson())
		return envelope.KindGeneric, v, err
	}
	return 0, jsonv.Value{}, &FieldError{Field: "content", Err: fmt.Errorf("%w: one of system, instruction, assistant_response, action_request, action_response or generic is required", envelope.ErrInvalid)}
}

func systemDict(c *historyv1.SystemContent) (jsonv.Value, error) {
	var ms []jsonv.Member
	if c.SystemMessage != nil {
		ms = append(ms, jsonv.Member{Key: "system_message", Value: jsonv.StringValue(c.GetSystemMessage())})
	}
	if c.SystemMessageJson != nil {
		v, err := nonTextJSON("system_message_json", "system_message", c.SystemMessage != nil, c.GetSystemMessageJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		ms = append(ms, jsonv.Member{Key: "system_message", Value: v})
	}
	switch dt := c.GetSystemDatetime().(type) {
	case *historyv1.SystemContent_DatetimeText:
		ms = append(ms, jsonv.Member{Key: "system_datetime", Value: jsonv.StringValue(dt.DatetimeText)})
	case *historyv1.SystemContent_DatetimeNow:
		ms = append(ms, jsonv.Member{Key: "system_datetime", Value: jsonv.BoolValue(dt.DatetimeNow)})
	case *historyv1.SystemContent_DatetimeJson:
		v, err := parseJSONField("datetime_json", dt.DatetimeJson)
		if err != nil {
			return jsonv.Value{}, err
		}
		if v.Kind() == jsonv.Bool {
			return jsonv.Value{}, &FieldError{Field: "datetime_json", Err: fmt.Errorf("%w: use datetime_now for a boolean", envelope.ErrInvalid)}
		}
		ms = append(ms, jsonv.Member{Key: "system_datetime", Value: v})
	}
	return jsonv.ObjectValue(ms...), nil
}

func instructionDict(c *historyv1.InstructionContent) (jsonv.Value, error) {
	var ms []jsonv.Member
	add := func(k string, v jsonv.Value) { ms = append(ms, jsonv.Member{Key: k, Value: v}) }
	switch v := c.GetInstructionValue().(type) {
	case *historyv1.InstructionContent_Instruction:
		add("instruction", jsonv.StringValue(v.Instruction))
	case *historyv1.InstructionContent_InstructionJson:
		j, err := parseJSONField("instruction_json", v.InstructionJson)
		if err != nil {
			return jsonv.Value{}, err
		}
		add("instruction", j)
	}
	switch v := c.GetGuidanceValue().(type) {
	case *historyv1.InstructionContent_Guidance:
		add("guidance", jsonv.StringValue(v.Guidance))
	case *historyv1.InstructionContent_GuidanceJson:
		j, err := parseJSONField("guidance_json", v.GuidanceJson)
		if err != nil {
			return jsonv.Value{}, err
		}
		add("guidance", j)
	}
	if len(c.GetPromptContextJson()) > 0 {
		items, err := parseJSONList("prompt_context_json", c.GetPromptContextJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		add("context", jsonv.ArrayValue(items...))
	}
	if c.PlainContent != nil {
		add("plain_content", jsonv.StringValue(c.GetPlainContent()))
	}
	if c.PlainContentJson != nil {
		v, err := nonTextJSON("plain_content_json", "plain_content", c.PlainContent != nil, c.GetPlainContentJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		add("plain_content", v)
	}
	if len(c.GetToolSchemasJson()) > 0 {
		items, err := parseJSONList("tool_schemas_json", c.GetToolSchemasJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		add("tool_schemas", jsonv.ArrayValue(items...))
	}
	if c.ResponseFormatJson != nil {
		rf, err := parseJSONField("response_format_json", c.GetResponseFormatJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		if rf.Kind() != jsonv.Object {
			// LionAGI ignores a non-dict response_format; over the wire that
			// would drop what the client sent without a word.
			return jsonv.Value{}, &FieldError{Field: "response_format_json", Err: fmt.Errorf("%w: must be a JSON object, got %s", envelope.ErrInvalid, rf.Kind())}
		}
		add("response_format", rf)
	}
	if len(c.GetImages()) > 0 {
		imgs := make([]jsonv.Value, len(c.GetImages()))
		for i, s := range c.GetImages() {
			imgs[i] = jsonv.StringValue(s)
		}
		add("images", jsonv.ArrayValue(imgs...))
	}
	if c.ImageDetail != nil {
		add("image_detail", jsonv.StringValue(c.GetImageDetail()))
	}
	if c.ImageDetailJson != nil {
		v, err := nonTextJSON("image_detail_json", "image_detail", c.ImageDetail != nil, c.GetImageDetailJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		add("image_detail", v)
	}
	return jsonv.ObjectValue(ms...), nil
}

func argumentsJSON(text string) (jsonv.Value, error) {
	if text == "" {
		return jsonv.ObjectValue(), nil
	}
	v, err := parseJSONField("arguments_json", text)
	if err != nil {
		return jsonv.Value{}, err
	}
	if v.Kind() != jsonv.Object {
		return jsonv.Value{}, &FieldError{Field: "arguments_json", Err: fmt.Errorf("%w: must be a JSON object, got %s", envelope.ErrInvalid, v.Kind())}
	}
	return v, nil
}

// storedArgumentsJSON reads a message's arguments_json: any JSON text (empty is {}), which the
// content's from_dict then reads as LionAGI's does (a request's arguments that are not an object
// go through its fuzzy conversion).
func storedArgumentsJSON(text string) (jsonv.Value, error) {
	if text == "" {
		return jsonv.ObjectValue(), nil
	}
	return parseJSONField("arguments_json", text)
}

// actionRequestDict is the content dict of a pre-built ActionRequest. Its arguments_json is what
// the message holds, as GetMessage writes it: [], null and "" (what LionAGI's from_dict leaves of
// arguments given as "[]", "[null]" and "[\"\"]") are kept as they are, by giving from_dict the
// text that reads back as them, so a message read and sent back is the same message; any other
// value goes through from_dict's rule (an object is kept, other text is fuzzy JSON).
func actionRequestDict(c *historyv1.ActionRequestContent) (jsonv.Value, error) {
	args, err := storedArgumentsJSON(c.GetArgumentsJson())
	if err != nil {
		return jsonv.Value{}, err
	}
	if c.GetArgumentsJson() != "" && envelope.IsStoredOnlyArguments(args) {
		args = envelope.ArgumentsText(args)
	}
	ms := []jsonv.Member{
		{Key: "function", Value: jsonv.StringValue(c.GetFunction())},
		{Key: "arguments", Value: args},
	}
	if c.ActionResponseId != nil {
		ms = append(ms, jsonv.Member{Key: "action_response_id", Value: jsonv.StringValue(c.GetActionResponseId())})
	}
	return jsonv.ObjectValue(ms...), nil
}

func actionResponseDict(c *historyv1.ActionResponseContent) (jsonv.Value, error) {
	args, err := storedArgumentsJSON(c.GetArgumentsJson())
	if err != nil {
		return jsonv.Value{}, err
	}
	fn := jsonv.StringValue(c.GetFunction())
	if c.FunctionJson != nil {
		if fn, err = nonTextJSON("function_json", "function", c.GetFunction() != "", c.GetFunctionJson()); err != nil {
			return jsonv.Value{}, err
		}
	}
	ms := []jsonv.Member{
		{Key: "function", Value: fn},
		{Key: "arguments", Value: args},
	}
	if c.OutputJson != nil {
		out, err := parseJSONField("output_json", c.GetOutputJson())
		if err != nil {
			return jsonv.Value{}, err
		}
		ms = append(ms, jsonv.Member{Key: "output", Value: out})
	}
	if c.ActionRequestId != nil {
		ms = append(ms, jsonv.Member{Key: "action_request_id", Value: jsonv.StringValue(c.GetActionRequestId())})
	}
	if c.Error != nil {
		ms = append(ms, jsonv.Member{Key: "error", Value: jsonv.StringValue(c.GetError())})
	}
	return jsonv.ObjectValue(ms...), nil
}

// nonTextJSON reads the JSON twin of a text field (system_message_json beside system_message,
// ...): set only for a value that is not a string, with the text field absent or empty
// (textSet).
func nonTextJSON(field, textField string, textSet bool, text string) (jsonv.Value, error) {
	v, err := parseJSONField(field, text)
	if err == nil && (textSet || v.Kind() == jsonv.String) {
		err = &FieldError{Field: field, Err: fmt.Errorf("%w: set only for a value that is not a string, with %s empty", envelope.ErrInvalid, textField)}
	}
	return v, err
}

// parseJSONField parses one any-JSON text field, naming it on failure.
func parseJSONField(field, text string) (jsonv.Value, error) {
	v, err := jsonv.ParseString(text)
	if err != nil {
		return jsonv.Value{}, &FieldError{Field: field, Err: fmt.Errorf("%w: %v", envelope.ErrInvalid, err)}
	}
	return v, nil
}

func parseJSONList(field string, texts []string) ([]jsonv.Value, error) {
	out := make([]jsonv.Value, len(texts))
	for i, t := range texts {
		v, err := parseJSONField(field+"["+strconv.Itoa(i)+"]", t)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// prefixField puts the request path in front of the field an error names.
func prefixField(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if fe, ok := err.(*FieldError); ok {
		return &FieldError{Field: joinField(prefix, fe.Field), Err: fe.Err}
	}
	if ef, ok := errors.AsType[*envelope.FieldError](err); ok {
		return &FieldError{Field: joinField(prefix, ef.Field), Err: &reasonError{msg: ef.Msg, err: ef.Unwrap()}}
	}
	return &FieldError{Field: prefix, Err: err}
}

// reasonError carries a domain error's text without its field (the
// FieldError around it names the field) while keeping its sentinel.
type reasonError struct {
	msg string
	err error
}

func (e *reasonError) Error() string { return e.msg }
func (e *reasonError) Unwrap() error { return e.err }

func joinField(prefix, field string) string {
	switch {
	case field == "":
		return prefix
	case prefix == "":
		return field
	case field[0] == '[':
		return prefix + field
	}
	return prefix + "." + field
}
