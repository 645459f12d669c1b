package server

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

var roleToProto = map[envelope.Role]historyv1.MessageRole{
	envelope.RoleSystem:    historyv1.MessageRole_MESSAGE_ROLE_SYSTEM,
	envelope.RoleUser:      historyv1.MessageRole_MESSAGE_ROLE_USER,
	envelope.RoleAssistant: historyv1.MessageRole_MESSAGE_ROLE_ASSISTANT,
	envelope.RoleUnset:     historyv1.MessageRole_MESSAGE_ROLE_UNSET,
	envelope.RoleAction:    historyv1.MessageRole_MESSAGE_ROLE_ACTION,
}

// messageOut says how a response converts messages: the render cap and
// whether to leave the rendering out. The zero value renders with the
// default cap (DefaultMaxRenderedBytes).
type messageOut struct {
	// maxRendered caps one message's rendered text (--max-rendered-bytes);
	// <= 0 means DefaultMaxRenderedBytes. Past it the message carries a
	// render_error naming the cap instead of a rendering (issue 11).
	maxRendered int
	// omitRendered leaves rendered unset and does no rendering (a read's
	// omit_rendered, a write without include_rendered).
	omitRendered bool
	// omitContent leaves the content unset, and the rendering too (a
	// write's omit_content: the answer is an acknowledgement).
	omitContent bool
}

// renderCap is the cap in force.
func (o messageOut) renderCap() int {
	if o.maxRendered <= 0 {
		return DefaultMaxRenderedBytes
	}
	return o.maxRendered
}

// message converts a domain message to the wire: the output-only role and,
// unless omitRendered, rendered fields are filled, metadata carries
// lion_class (docs/design.md#wire-model). The output-only sequence stays 0: a
// message outside a branch has none; stored fills it for branch messages.
func (o messageOut) message(m *envelope.Message) *historyv1.Message {
	if o.omitContent {
		return envelopeToProto(m)
	}
	pb := unrenderedMessageToProto(m)
	if !o.omitRendered {
		pb.Rendered = o.rendered(m.RenderWithin(o.renderCap()))
	}
	return pb
}

// rendered is renderedToProto, with a rendering that passed the cap
// described by the flag that sets it.
func (o messageOut) rendered(r envelope.Rendered, err error) *historyv1.Rendered {
	if tl, ok := errors.AsType[*envelope.RenderTooLargeError](err); ok {
		return &historyv1.Rendered{RenderError: renderTooLargeText(tl)}
	}
	return renderedToProto(r, err)
}

// renderTooLargeText describes a rendering past the cap with its figures
// and flag.
func renderTooLargeText(tl *envelope.RenderTooLargeError) string {
	return fmt.Sprintf("render failed: the rendered text does not fit in the render cap of %d bytes (%s; rendering stopped at %d bytes); "+
		"read the message's content, or raise the cap", tl.Limit, flagMaxRenderedBytes, tl.Bytes)
}

// messageToProto converts a domain message to the wire, rendering it with
// the default cap (messageOut's zero value).
func messageToProto(m *envelope.Message) *historyv1.Message { return messageOut{}.message(m) }

// unrenderedMessageToProto is messageToProto without the rendering, for
// the responses of writes that did not ask for it (rendering costs more
// than the write).
func unrenderedMessageToProto(m *envelope.Message) *historyv1.Message {
	pb := envelopeToProto(m)
	setContent(pb, m.Content)
	return pb
}

// envelopeToProto converts a domain message to the wire without its content
// or rendering: what an omit_content write answers with.
func envelopeToProto(m *envelope.Message) *historyv1.Message {
	pb := &historyv1.Message{
		Id:        m.ID.String(),
		CreatedAt: proto.Float64(m.CreatedAt),
		Metadata:  metadataToStruct(m),
		Role:      roleToProto[m.Role()],
		Sender:    participantToProto(m.Sender),
		Recipient: participantToProto(m.Recipient),
		Channel:   m.Channel,
	}
	if m.HasEmbedding {
		pb.Embedding = &historyv1.Embedding{Values: append([]float64{}, m.Embedding...)}
	}
	return pb
}

// setContent sets pb's content oneof from a message's typed content.
func setContent(pb *historyv1.Message, content envelope.Content) {
	switch c := content.(type) {
	case *envelope.SystemContent:
		sc := &historyv1.SystemContent{}
		if c.Value != nil {
			sc.SystemMessageJson = proto.String(c.Value.String()) // not text: LionAGI kept it
		} else {
			sc.SystemMessage = proto.String(c.SystemMessage)
		}
		switch {
		case c.SystemDatetime.IsNull():
		case c.SystemDatetime.Kind() == jsonv.String:
			s, _ := c.SystemDatetime.Str()
			sc.SystemDatetime = &historyv1.SystemContent_DatetimeText{DatetimeText: s}
		default:
			sc.SystemDatetime = &historyv1.SystemContent_DatetimeJson{DatetimeJson: c.SystemDatetime.String()}
		}
		pb.Content = &historyv1.Message_System{System: sc}
	case *envelope.InstructionContent:
		pb.Content = &historyv1.Message_Instruction{Instruction: instructionToProto(c)}
	case *envelope.AssistantResponseContent:
		ac := &historyv1.AssistantResponseContent{AssistantResponse: c.AssistantResponse}
		if c.Value != nil {
			js := c.Value.String()
			ac.AssistantResponseJson = &js
		}
		pb.Content = &historyv1.Message_AssistantResponse{AssistantResponse: ac}
	case *envelope.ActionRequestContent:
		pb.Content = &historyv1.Message_ActionRequest{ActionRequest: &historyv1.ActionRequestContent{
			Function: c.Function, ArgumentsJson: c.Arguments.String(), ActionResponseId: c.ActionResponseID,
		}}
	case *envelope.ActionResponseContent:
		ar := &historyv1.ActionResponseContent{
			Function: c.Function, ArgumentsJson: c.Arguments.String(), ActionRequestId: c.ActionRequestID, Error: c.Error,
		}
		if c.FunctionValue != nil {
			ar.FunctionJson = proto.String(c.FunctionValue.String()) // not text: LionAGI kept it
		}
		if !c.Output.IsNull() {
			ar.OutputJson = proto.String(c.Output.String())
		}
		pb.Content = &historyv1.Message_ActionResponse{ActionResponse: ar}
	case *envelope.GenericContent:
		g := &historyv1.GenericContent{}
		if d := c.Dict(); !d.IsNull() {
			g.ContentJson = proto.String(d.String())
		}
		pb.Content = &historyv1.Message_Generic{Generic: g}
	}
}

func instructionToProto(c *envelope.InstructionContent) *historyv1.InstructionContent {
	ic := &historyv1.InstructionContent{Images: append([]string(nil), c.Images...)}
	if s, ok := c.Instruction.Str(); ok {
		ic.InstructionValue = &historyv1.InstructionContent_Instruction{Instruction: s}
	} else if !c.Instruction.IsNull() {
		ic.InstructionValue = &historyv1.InstructionContent_InstructionJson{InstructionJson: c.Instruction.String()}
	}
	if s, ok := c.Guidance.Str(); ok {
		ic.GuidanceValue = &historyv1.InstructionContent_Guidance{Guidance: s}
	} else if !c.Guidance.IsNull() {
		ic.GuidanceValue = &historyv1.InstructionContent_GuidanceJson{GuidanceJson: c.Guidance.String()}
	}
	for _, v := range c.PromptContext {
		ic.PromptContextJson = append(ic.PromptContextJson, v.String())
	}
	for _, v := range c.ToolSchemas {
		ic.ToolSchemasJson = append(ic.ToolSchemasJson, v.String())
	}
	if c.PlainContentValue != nil {
		ic.PlainContentJson = proto.String(c.PlainContentValue.String()) // not text: LionAGI kept it
	} else if c.PlainContent != "" {
		ic.PlainContent = proto.String(c.PlainContent)
	}
	if !c.ResponseFormat.IsNull() {
		ic.ResponseFormatJson = proto.String(c.ResponseFormat.String())
	}
	if c.ImageDetailValue != nil {
		ic.ImageDetailJson = proto.String(c.ImageDetailValue.String()) // not text: LionAGI kept it
	} else if c.ImageDetail != "" {
		ic.ImageDetail = proto.String(c.ImageDetail)
	}
	return ic
}

// participantToProto writes a participant as a Value: null for None, else
// the string LionAGI's JSON writes ("unset" included).
func participantToProto(p envelope.Participant) *structpb.Value {
	if p.IsNone() {
		return structpb.NewNullValue()
	}
	return structpb.NewStringValue(p.String())
}

// renderedToProto is the output-only rendering; a failed rendering carries
// its error instead of a value (LionAGI's chat_msg becomes None).
func renderedToProto(r envelope.Rendered, err error) *historyv1.Rendered {
	if err != nil {
		return &historyv1.Rendered{RenderError: err.Error()}
	}
	if r.Value != nil {
		return &historyv1.Rendered{Value: &historyv1.Rendered_Json{Json: r.Value.String()}}
	}
	if !r.IsParts() {
		return &historyv1.Rendered{Value: &historyv1.Rendered_Text{Text: r.Text}}
	}
	return &historyv1.Rendered{Value: &historyv1.Rendered_Parts{Parts: partsToProto(r.Parts)}}
}

func partsToProto(parts []envelope.ContentPart) *historyv1.ContentParts {
	out := &historyv1.ContentParts{Parts: make([]*historyv1.ContentPart, len(parts))}
	for i, p := range parts {
		cp := &historyv1.ContentPart{Type: p.Type, Text: p.Text}
		if p.Type == "image_url" {
			cp.ImageUrl = &historyv1.ImageURL{Url: p.ImageURL, Detail: p.Detail}
		}
		out.Parts[i] = cp
	}
	return out
}

// chatMessageToProto is the chat projection on the wire.
func chatMessageToProto(c envelope.ChatMessage) *historyv1.ChatMessage {
	pb := &historyv1.ChatMessage{Role: string(c.Role)}
	switch {
	case c.Content.Value != nil:
		pb.Content = &historyv1.ChatMessage_ContentJson{ContentJson: c.Content.Value.String()}
	case c.Content.IsParts():
		pb.Content = &historyv1.ChatMessage_Parts{Parts: partsToProto(c.Content.Parts)}
	default:
		pb.Content = &historyv1.ChatMessage_Text{Text: c.Content.Text}
	}
	return pb
}

// metadataToStruct is the message's metadata with its lion_class, as a
// Struct (ADR-0001 D2: the discriminator is added on output).
func metadataToStruct(m *envelope.Message) *structpb.Struct {
	s := jsonObjectToStruct(m.Metadata)
	s.Fields["lion_class"] = structpb.NewStringValue(m.ClassName())
	return s
}

// jsonObjectToStruct converts metadata to a Struct. Struct numbers are
// doubles, so metadata numbers travel as doubles over gRPC (metadata is
// never rendered; ImportBranch/ExportBranch keep exact numbers as JSON
// text end to end).
func jsonObjectToStruct(v jsonv.Value) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, v.Len()+1)} // +1: room for lion_class
	for _, m := range v.Members() {
		s.Fields[m.Key] = jsonToValue(m.Value)
	}
	return s
}

func jsonToValue(v jsonv.Value) *structpb.Value {
	switch v.Kind() {
	case jsonv.Bool:
		b, _ := v.Bool()
		return structpb.NewBoolValue(b)
	case jsonv.Number:
		f, _ := v.Float64()
		if math.IsInf(f, 0) {
			// A huge integer literal has no double; keep its text.
			return structpb.NewStringValue(v.Literal())
		}
		return structpb.NewNumberValue(f)
	case jsonv.String:
		s, _ := v.Str()
		return structpb.NewStringValue(s)
	case jsonv.Array:
		l := &structpb.ListValue{Values: make([]*structpb.Value, v.Len())}
		for i, e := range v.Elems() {
			l.Values[i] = jsonToValue(e)
		}
		return structpb.NewListValue(l)
	case jsonv.Object:
		return structpb.NewStructValue(jsonObjectToStruct(v))
	}
	return structpb.NewNullValue()
}

// structToJSON converts a Struct to a JSON object. Keys are sorted (a
// proto map has no order); a double that holds an integer becomes an
// integer literal, so ids and counts read back as ints.
func structToJSON(s *structpb.Struct) (jsonv.Value, error) { return structToJSONDepth(s, 0) }

func structToJSONDepth(s *structpb.Struct, depth int) (jsonv.Value, error) {
	if depth > jsonv.MaxDepth {
		return jsonv.Value{}, errTooDeep
	}
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		keys = append(keys, k)
	}
	sortStrings(keys)
	ms := make([]jsonv.Member, 0, len(keys))
	for _, k := range keys {
		v, err := valueToJSON(s.GetFields()[k], depth+1)
		if err != nil {
			return jsonv.Value{}, err
		}
		ms = append(ms, jsonv.Member{Key: k, Value: v})
	}
	return jsonv.ObjectValue(ms...), nil
}

func valueToJSON(v *structpb.Value, depth int) (jsonv.Value, error) {
	if depth > jsonv.MaxDepth {
		return jsonv.Value{}, errTooDeep
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		return jsonv.BoolValue(k.BoolValue), nil
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return jsonv.Value{}, errNonFinite
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return jsonv.IntValue(int64(f)), nil
		}
		return jsonv.FloatValue(f), nil
	case *structpb.Value_StringValue:
		return jsonv.StringValue(k.StringValue), nil
	case *structpb.Value_ListValue:
		out := make([]jsonv.Value, len(k.ListValue.GetValues()))
		for i, e := range k.ListValue.GetValues() {
			var err error
			if out[i], err = valueToJSON(e, depth+1); err != nil {
				return jsonv.Value{}, err
			}
		}
		return jsonv.ArrayValue(out...), nil
	case *structpb.Value_StructValue:
		return structToJSONDepth(k.StructValue, depth+1)
	}
	return jsonv.NullValue(), nil
}
