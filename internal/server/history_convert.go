package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// parseID reads a required UUID field (any form Python's uuid.UUID(str) accepts). Every id field
// of every request is read here or by parseOptionalID, so the nil UUID is refused in one place
// (issue 11 case 8: envelope.ErrNilID, INVALID_ARGUMENT naming the field).
func parseID(field, s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.UUID{}, &FieldError{Field: field, Err: fmt.Errorf("%w: required", envelope.ErrInvalid)}
	}
	id, ok, err := envelope.ParseElementID(s)
	if !ok {
		return uuid.UUID{}, &FieldError{Field: field, Err: fmt.Errorf("%w: not a UUID: %q", envelope.ErrInvalid, s)}
	}
	if err != nil {
		return uuid.UUID{}, &FieldError{Field: field, Err: err}
	}
	return id, nil
}

// parseOptionalID reads a UUID field where empty means "none" (the zero UUID).
func parseOptionalID(field, s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.UUID{}, nil
	}
	return parseID(field, s)
}

// parseIDs reads a MessageIds list, naming the offending index.
func parseIDs(field string, ids []string) ([]uuid.UUID, error) {
	out := make([]uuid.UUID, len(ids))
	for i, s := range ids {
		id, err := parseID(fmt.Sprintf("%s[%d]", field, i), s)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// writeOptions reads request_id and expected_head_sequence.
func writeOptions(requestID string, expected *uint64) store.WriteOptions {
	return store.WriteOptions{RequestID: requestID, ExpectedHead: expected}
}

// factoryParticipant reads a factory sender or recipient: absent or null is
// None (add_message's default), a string is kept for the envelope to
// normalise (ADR-0006 D1).
func factoryParticipant(field string, v *structpb.Value) (jsonv.Value, error) {
	if v == nil {
		return jsonv.NullValue(), nil
	}
	p, err := participantFromProto(v)
	if err != nil {
		return jsonv.Value{}, &FieldError{Field: field, Err: err}
	}
	return p, nil
}

// optionalStruct converts an optional Struct to a JSON object (null when absent).
func optionalStruct(field string, s *structpb.Struct) (jsonv.Value, error) {
	if s == nil {
		return jsonv.NullValue(), nil
	}
	v, err := structToJSON(s)
	if err != nil {
		return jsonv.Value{}, &FieldError{Field: field, Err: err}
	}
	return v, nil
}

// optionalJSON parses an optional JSON text field (null when absent).
func optionalJSON(field string, s *string) (jsonv.Value, error) {
	if s == nil {
		return jsonv.NullValue(), nil
	}
	return parseJSONField(field, *s)
}

// jsonList parses repeated JSON text fields into a JSON array (null when empty).
func jsonList(field string, texts []string) (jsonv.Value, error) {
	if len(texts) == 0 {
		return jsonv.NullValue(), nil
	}
	items, err := parseJSONList(field, texts)
	if err != nil {
		return jsonv.Value{}, err
	}
	return jsonv.ArrayValue(items...), nil
}

// presentList reads a repeated field and its presence-carrying StringList twin (field + "_list"):
// the values and whether the list was given at all (non-empty, or the twin present). Both set is
// INVALID_ARGUMENT (issue 13 item 5).
func presentList(field string, repeated []string, list *historyv1.StringList) ([]string, bool, error) {
	if list == nil {
		return repeated, len(repeated) > 0, nil
	}
	if len(repeated) > 0 {
		return nil, false, &FieldError{Field: field + "_list", Err: fmt.Errorf("%w: set %s or %s_list, not both", envelope.ErrInvalid, field[strings.LastIndexByte(field, '.')+1:], field[strings.LastIndexByte(field, '.')+1:])}
	}
	return list.GetValues(), true, nil
}

// textOrJSON reads a oneof of plain text and JSON text.
func textOrJSON(field string, text *string, jsonText *string) (jsonv.Value, error) {
	switch {
	case text != nil:
		return jsonv.StringValue(*text), nil
	case jsonText != nil:
		return parseJSONField(field, *jsonText)
	}
	return jsonv.NullValue(), nil
}

// instructionFactory maps an InstructionInput onto the factory
// (create_instruction's arguments).
func instructionFactory(f *store.Factory, in *historyv1.InstructionInput, hasTarget bool) error {
	var text, js *string
	switch v := in.GetInstructionValue().(type) {
	case *historyv1.InstructionInput_Instruction:
		text = &v.Instruction
	case *historyv1.InstructionInput_InstructionJson:
		js = &v.InstructionJson
	}
	if hasTarget && (text != nil || js != nil) {
		return &FieldError{Field: "instruction.instruction", Err: fmt.Errorf("%w: with target_id the target is the instruction; leave this empty", envelope.ErrInvalid)}
	}
	var err error
	if f.Instruction, err = textOrJSON("instruction.instruction_json", text, js); err != nil {
		return err
	}
	text, js = nil, nil
	switch v := in.GetGuidanceValue().(type) {
	case *historyv1.InstructionInput_Guidance:
		text = &v.Guidance
	case *historyv1.InstructionInput_GuidanceJson:
		js = &v.GuidanceJson
	}
	if f.Guidance, err = textOrJSON("instruction.guidance_json", text, js); err != nil {
		return err
	}
	ctxTexts, ctxGiven, err := presentList("instruction.context_json", in.GetContextJson(), in.GetContextJsonList())
	if err != nil {
		return err
	}
	if f.Context, err = jsonList("instruction.context_json", ctxTexts); err != nil {
		return err
	}
	if ctxGiven && len(ctxTexts) == 0 {
		f.Context = jsonv.ArrayValue() // present and empty (issue 13 item 5)
	}
	switch in.GetHandleContext() {
	case historyv1.ContextMode_CONTEXT_MODE_UNSPECIFIED, historyv1.ContextMode_CONTEXT_MODE_EXTEND:
	case historyv1.ContextMode_CONTEXT_MODE_REPLACE:
		f.HandleContext = "replace"
	default:
		return &FieldError{Field: "instruction.handle_context", Err: fmt.Errorf("%w: unknown context mode %d", envelope.ErrInvalid, in.GetHandleContext())}
	}
	if in.PlainContent != nil {
		f.PlainContent = jsonv.StringValue(in.GetPlainContent())
	}
	toolTexts, toolsGiven, err := presentList("instruction.tool_schemas_json", in.GetToolSchemasJson(), in.GetToolSchemasJsonList())
	if err != nil {
		return err
	}
	if f.ToolSchemas, err = jsonList("instruction.tool_schemas_json", toolTexts); err != nil {
		return err
	}
	if toolsGiven && len(toolTexts) == 0 {
		f.ToolSchemas = jsonv.ArrayValue()
	}
	if items := f.ToolSchemas.Elems(); len(items) == 1 && items[0].Kind() == jsonv.Object && items[0].Has("tools") {
		f.ToolSchemas = items[0] // a {"tools": [...]} wrapper, unwrapped by the factory (ADR-0006 D2)
	}
	if f.ResponseFormat, err = optionalJSON("instruction.response_format_json", in.ResponseFormatJson); err != nil {
		return err
	}
	if !f.ResponseFormat.IsNull() && f.ResponseFormat.Kind() != jsonv.Object {
		return &FieldError{Field: "instruction.response_format_json", Err: fmt.Errorf("%w: must be a JSON object, got %s", envelope.ErrInvalid, f.ResponseFormat.Kind())}
	}
	images, imagesGiven, err := presentList("instruction.images", in.GetImages(), in.GetImagesList())
	if err != nil {
		return err
	}
	if imagesGiven {
		imgs := make([]jsonv.Value, len(images))
		for i, s := range images {
			imgs[i] = jsonv.StringValue(s)
		}
		f.Images = jsonv.ArrayValue(imgs...)
	}
	if in.ImageDetail != nil {
		f.ImageDetail = jsonv.StringValue(in.GetImageDetail())
	}
	return nil
}

// systemText is a SystemInput's text: LionAGI's default when absent or
// empty, so that a present system input always makes a System.
func systemText(in *historyv1.SystemInput) jsonv.Value {
	if s := in.GetSystemMessage(); s != "" {
		return jsonv.StringValue(s)
	}
	return jsonv.StringValue(envelope.DefaultSystemMessage)
}

// systemDatetime is a SystemInput's system_datetime (null when absent).
func systemDatetime(in *historyv1.SystemInput) jsonv.Value {
	switch v := in.GetSystemDatetime().(type) {
	case *historyv1.SystemInput_DatetimeText:
		return jsonv.StringValue(v.DatetimeText)
	case *historyv1.SystemInput_DatetimeNow:
		if v.DatetimeNow {
			return jsonv.BoolValue(true)
		}
	}
	return jsonv.NullValue()
}

// addInputFromProto maps AddMessage's request onto the store's AddInput.
func addInputFromProto(req *historyv1.AddMessageRequest) (store.AddInput, error) {
	var in store.AddInput
	if req.GetOmitContent() && req.GetIncludeRendered() {
		return in, &FieldError{Field: "omit_content", Err: fmt.Errorf("%w: include_rendered asks for the rendering, which omit_content leaves out with the content", envelope.ErrInvalid)}
	}
	target, err := parseOptionalID("target_id", req.GetTargetId())
	if err != nil {
		return in, err
	}
	hasTarget := target != (uuid.UUID{})
	if hasTarget {
		in.Target = &target
		in.TargetKind = inputKind(req) // the target must be of the input's kind (docs/design.md#branches)
	}
	f := &in.Factory
	if f.Sender, err = factoryParticipant("sender", req.GetSender()); err != nil {
		return in, err
	}
	if f.Recipient, err = factoryParticipant("recipient", req.GetRecipient()); err != nil {
		return in, err
	}
	if f.Metadata, err = optionalStruct("metadata", req.GetMetadata()); err != nil {
		return in, err
	}
	switch v := req.GetInput().(type) {
	case *historyv1.AddMessageRequest_Instruction:
		return in, instructionFactory(f, v.Instruction, hasTarget)
	case *historyv1.AddMessageRequest_AssistantResponse:
		switch r := v.AssistantResponse.GetResponse().(type) {
		case *historyv1.AssistantResponseInput_Text:
			f.AssistantResponse = jsonv.StringValue(r.Text)
		case *historyv1.AssistantResponseInput_RawResponseJson:
			// Present is enough: from_response takes any value, `[]`, `{}`, `""` and `null`
			// included (lionagi/protocols/messages/assistant_response.py,
			// parse_assistant_response); empty text is no JSON at all.
			if r.RawResponseJson == "" {
				return in, &FieldError{Field: "assistant_response.raw_response_json", Err: fmt.Errorf("%w: required: the raw response as JSON text (`\"\"` for an empty string)", envelope.ErrInvalid)}
			}
			if f.AssistantResponse, err = parseJSONField("assistant_response.raw_response_json", r.RawResponseJson); err != nil {
				return in, err
			}
			f.AssistantRaw = !hasTarget
		}
		if !hasTarget && !f.AssistantRaw && !f.AssistantResponse.Truthy() {
			return in, &FieldError{Field: "assistant_response", Err: fmt.Errorf("%w: text or raw_response_json is required", envelope.ErrInvalid)}
		}
	case *historyv1.AddMessageRequest_System:
		f.SystemDatetime = systemDatetime(v.System)
		if !hasTarget {
			f.System = systemText(v.System)
		}
	case *historyv1.AddMessageRequest_ActionRequest:
		if v.ActionRequest.GetFunction() != "" {
			f.ActionFunction = jsonv.StringValue(v.ActionRequest.GetFunction())
		} else if !hasTarget {
			return in, &FieldError{Field: "action_request.function", Err: fmt.Errorf("%w: required", envelope.ErrInvalid)}
		}
		if t := v.ActionRequest.GetArgumentsJson(); t != "" || !hasTarget {
			if f.ActionArguments, err = argumentsJSON(t); err != nil {
				return in, prefixField("action_request", err)
			}
		}
	case *historyv1.AddMessageRequest_ActionOutput:
		if hasTarget {
			return in, &FieldError{Field: "target_id", Err: fmt.Errorf("%w: an action output names its request in action_output.action_request_id", envelope.ErrInvalid)}
		}
		req, err := parseID("action_output.action_request_id", v.ActionOutput.GetActionRequestId())
		if err != nil {
			return in, err
		}
		in.ActionRequest = &req
		if f.ActionOutput, err = optionalJSON("action_output.output_json", v.ActionOutput.OutputJson); err != nil {
			return in, err
		}
		f.ActionOutputSet = true
		f.ActionError = v.ActionOutput.Error
	case *historyv1.AddMessageRequest_Message:
		if hasTarget || req.GetSender() != nil || req.GetRecipient() != nil || req.GetMetadata() != nil {
			return in, &FieldError{Field: "message", Err: fmt.Errorf("%w: a pre-built message carries its own participants and metadata; target_id, sender, recipient and metadata must be empty", envelope.ErrInvalid)}
		}
		m, err := messageFromProto("message", v.Message)
		if err != nil {
			return in, err
		}
		return store.AddInput{Message: m}, nil
	default:
		if !hasTarget {
			return in, &FieldError{Field: "input", Err: fmt.Errorf("%w: one of instruction, assistant_response, system, action_request, action_output or message is required", envelope.ErrInvalid)}
		}
	}
	return in, nil
}

// inputKind is the kind of message AddMessage's input oneof writes, nil when the oneof is empty or
// gives a whole message.
func inputKind(req *historyv1.AddMessageRequest) *envelope.Kind {
	var k envelope.Kind
	switch req.GetInput().(type) {
	case *historyv1.AddMessageRequest_Instruction:
		k = envelope.KindInstruction
	case *historyv1.AddMessageRequest_AssistantResponse:
		k = envelope.KindAssistantResponse
	case *historyv1.AddMessageRequest_System:
		k = envelope.KindSystem
	case *historyv1.AddMessageRequest_ActionRequest:
		k = envelope.KindActionRequest
	case *historyv1.AddMessageRequest_ActionOutput:
		k = envelope.KindActionResponse
	default:
		return nil
	}
	return &k
}

// inputField is the request field AddMessage's input errors name.
func inputField(req *historyv1.AddMessageRequest) string {
	switch req.GetInput().(type) {
	case *historyv1.AddMessageRequest_Instruction:
		return "instruction"
	case *historyv1.AddMessageRequest_AssistantResponse:
		return "assistant_response"
	case *historyv1.AddMessageRequest_System:
		return "system"
	case *historyv1.AddMessageRequest_ActionRequest:
		return "action_request"
	case *historyv1.AddMessageRequest_ActionOutput:
		return "action_output"
	case *historyv1.AddMessageRequest_Message:
		return "message"
	}
	return "input"
}

// factoryError names the request field of an input error the factory
// returned: a LionAGI content path ("content.images[0]") becomes the
// input's ("instruction.images[0]"); an input error naming no field names
// the input.
func factoryError(input string, err error) error {
	if errors.Is(err, store.ErrObserver) {
		return err
	}
	if ef, ok := errors.AsType[*envelope.FieldError](err); ok {
		path := ef.Field
		if path == "content" || len(path) > 8 && path[:8] == "content." {
			path = path[len("content"):]
			return &FieldError{Field: joinField(input, trimDot(path)), Err: &reasonError{msg: ef.Msg, err: ef.Unwrap()}}
		}
		return err
	}
	if _, isField := errors.AsType[fieldError](err); !isField && errors.Is(err, envelope.ErrInvalid) && !hasRule(err) {
		return &FieldError{Field: input, Err: err}
	}
	return err
}

func trimDot(s string) string {
	if len(s) > 0 && s[0] == '.' {
		return s[1:]
	}
	return s
}

// hasRule reports whether errorRules maps err.
func hasRule(err error) bool {
	for _, r := range errorRules {
		if errors.Is(err, r.target) {
			return true
		}
	}
	return false
}

// viewFromProto maps a MessageView.
func viewFromProto(field string, v historyv1.MessageView) (store.View, error) {
	switch v {
	case historyv1.MessageView_MESSAGE_VIEW_UNSPECIFIED:
		return store.ViewAll, nil
	case historyv1.MessageView_MESSAGE_VIEW_INSTRUCTIONS:
		return store.ViewInstructions, nil
	case historyv1.MessageView_MESSAGE_VIEW_ASSISTANT_RESPONSES:
		return store.ViewAssistantResponses, nil
	case historyv1.MessageView_MESSAGE_VIEW_ACTIONS:
		return store.ViewActions, nil
	case historyv1.MessageView_MESSAGE_VIEW_ACTION_REQUESTS:
		return store.ViewActionRequests, nil
	case historyv1.MessageView_MESSAGE_VIEW_ACTION_RESPONSES:
		return store.ViewActionResponses, nil
	}
	return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: unknown view %d", envelope.ErrInvalid, v)}
}

// modeFromProto maps a SerializationMode (unspecified is json).
func modeFromProto(m historyv1.SerializationMode) (envelope.Mode, error) {
	switch m {
	case historyv1.SerializationMode_SERIALIZATION_MODE_UNSPECIFIED, historyv1.SerializationMode_SERIALIZATION_MODE_JSON:
		return envelope.ModeJSON, nil
	case historyv1.SerializationMode_SERIALIZATION_MODE_PYTHON:
		return envelope.ModePython, nil
	case historyv1.SerializationMode_SERIALIZATION_MODE_DB:
		return envelope.ModeDB, nil
	}
	return 0, &FieldError{Field: "mode", Err: fmt.Errorf("%w: unknown mode %d", envelope.ErrInvalid, m)}
}

// dbMetaKeyFromProto checks a request's db_meta_key (envelope.CheckDBMetaKey).
func dbMetaKeyFromProto(key string) (string, error) {
	if err := envelope.CheckDBMetaKey(key); err != nil {
		return "", &FieldError{Field: "db_meta_key", Err: err}
	}
	return key, nil
}

// stored converts a branch message, with its sequence; it is rendered
// unless o.omitRendered (a read's omit_rendered, a write without
// include_rendered).
func (o messageOut) stored(sm store.StoredMessage) *historyv1.Message {
	if sm.Message == nil {
		return nil
	}
	pb := o.message(sm.Message)
	pb.Sequence = sm.Sequence
	return pb
}

// branchToProto converts a branch description.
func branchToProto(b store.BranchInfo) *historyv1.Branch {
	pb := &historyv1.Branch{
		Id:                  b.ID.String(),
		CreatedAt:           b.CreatedAt,
		Metadata:            jsonObjectToStruct(b.Metadata),
		Name:                b.Name,
		User:                b.User,
		Incarnation:         b.Incarnation.String(),
		HeadSequence:        b.HeadSequence,
		MessageCount:        uint64(b.MessageCount),
		ProgressionSelected: b.Selected,
	}
	for _, f := range []struct {
		src *uuid.UUID
		dst **string
	}{{b.SystemID, &pb.SystemId}, {b.ParentBranchID, &pb.ParentBranchId}, {b.ForkPoint, &pb.ForkPoint}} {
		if f.src != nil {
			*f.dst = proto.String(f.src.String())
		}
	}
	return pb
}
