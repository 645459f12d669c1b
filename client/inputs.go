package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Input is one message input of AddMessage, built by Instruction, AssistantText, AssistantRaw,
// System, ActionRequest or ActionOutput, so that the common case is one call instead of the
// generated oneof wrappers. Give it to Client.Add, or turn it into a request with Request.
type Input struct {
	set func(*historyv1.AddMessageRequest)
	err error // a value that could not be written as JSON text; Request and Add return it
}

// InstructionOption sets an optional field of an Instruction.
type InstructionOption func(*historyv1.InstructionInput) error

// AddOption sets an optional field of an AddMessage request: its participants, request id,
// metadata, include_rendered or omit_content.
type AddOption func(*historyv1.AddMessageRequest) error

// Instruction is a user instruction (LionAGI's Instruction) with the given text.
func Instruction(text string, opts ...InstructionOption) Input {
	in := &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text}}
	for _, opt := range opts {
		if err := opt(in); err != nil {
			return Input{err: fmt.Errorf("client.Instruction: %w", err)}
		}
	}
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_Instruction{Instruction: in}
	}}
}

// WithContext adds context items to an Instruction; each is written as JSON (encoding/json), or
// taken as it is when it is a json.RawMessage.
func WithContext(items ...any) InstructionOption {
	return func(in *historyv1.InstructionInput) error {
		for _, item := range items {
			text, err := jsonText(item)
			if err != nil {
				return fmt.Errorf("context: %w", err)
			}
			in.ContextJson = append(in.ContextJson, text)
		}
		return nil
	}
}

// WithGuidance sets an Instruction's guidance text.
func WithGuidance(text string) InstructionOption {
	return func(in *historyv1.InstructionInput) error {
		in.GuidanceValue = &historyv1.InstructionInput_Guidance{Guidance: text}
		return nil
	}
}

// WithImages adds images (URLs, data: URIs or base64) to an Instruction, with a detail of "low",
// "high" or "auto" ("" leaves it unset).
func WithImages(detail string, images ...string) InstructionOption {
	return func(in *historyv1.InstructionInput) error {
		in.Images = append(in.Images, images...)
		if detail != "" {
			in.ImageDetail = proto.String(detail)
		}
		return nil
	}
}

// WithResponseFormat sets the JSON object an Instruction asks the answer to follow.
func WithResponseFormat(format any) InstructionOption {
	return func(in *historyv1.InstructionInput) error {
		text, err := jsonText(format)
		if err != nil {
			return fmt.Errorf("response format: %w", err)
		}
		in.ResponseFormatJson = proto.String(text)
		return nil
	}
}

// WithTools adds tool schemas to an Instruction, each written as JSON.
func WithTools(schemas ...any) InstructionOption {
	return func(in *historyv1.InstructionInput) error {
		for _, s := range schemas {
			text, err := jsonText(s)
			if err != nil {
				return fmt.Errorf("tool schema: %w", err)
			}
			in.ToolSchemasJson = append(in.ToolSchemasJson, text)
		}
		return nil
	}
}

// AssistantText is an assistant response (LionAGI's AssistantResponse) with the given text.
func AssistantText(text string) Input {
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
			Response: &historyv1.AssistantResponseInput_Text{Text: text},
		}}
	}}
}

// AssistantRaw is an assistant response from a provider's raw response (JSON text, such as a Chat
// Completions response): the server extracts the text and keeps the raw value in the metadata.
func AssistantRaw(responseJSON string) Input {
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
			Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: responseJSON},
		}}
	}}
}

// System sets the branch's system message (at index 0) through AddMessage.
func System(text string) Input {
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_System{System: SystemInput(text)}
	}}
}

// SystemInput is a system message for CreateBranchRequest.System or SetSystemRequest.
func SystemInput(text string) *historyv1.SystemInput {
	return &historyv1.SystemInput{SystemMessage: proto.String(text)}
}

// ActionRequest is a tool call: function with its arguments, written as a JSON object
// (encoding/json; a json.RawMessage is taken as it is).
func ActionRequest(function string, arguments any) Input {
	args, err := jsonText(arguments)
	if err != nil {
		return Input{err: fmt.Errorf("client.ActionRequest: arguments: %w", err)}
	}
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: function, ArgumentsJson: args}}
	}}
}

// ActionOutput answers the ActionRequest requestID with the tool's output, written as JSON.
func ActionOutput(requestID string, output any) Input {
	out, err := jsonText(output)
	if err != nil {
		return Input{err: fmt.Errorf("client.ActionOutput: output: %w", err)}
	}
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: requestID, OutputJson: proto.String(out)}}
	}}
}

// ActionError answers the ActionRequest requestID with a failure: the tool's error message, and no
// output.
func ActionError(requestID, message string) Input {
	return Input{set: func(r *historyv1.AddMessageRequest) {
		r.Input = &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: requestID, Error: proto.String(message)}}
	}}
}

// From sets the message's sender: a role name, a UUID, or any other text (Participant).
func From(sender string) AddOption {
	return func(r *historyv1.AddMessageRequest) error { r.Sender = Participant(sender); return nil }
}

// To sets the message's recipient, like From.
func To(recipient string) AddOption {
	return func(r *historyv1.AddMessageRequest) error { r.Recipient = Participant(recipient); return nil }
}

// WithRequestID sets the request id that makes the call idempotent; without it the client makes
// one for the call's retries.
func WithRequestID(id string) AddOption {
	return func(r *historyv1.AddMessageRequest) error { r.RequestId = id; return nil }
}

// WithMetadata merges metadata into the message's metadata.extra.
func WithMetadata(md map[string]any) AddOption {
	return func(r *historyv1.AddMessageRequest) error {
		s, err := structpb.NewStruct(md)
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		r.Metadata = s
		return nil
	}
}

// IncludeRendered asks for the written message's rendered text in the response.
func IncludeRendered() AddOption {
	return func(r *historyv1.AddMessageRequest) error { r.IncludeRendered = true; return nil }
}

// OmitContent asks for an acknowledgement: the response's message without its content and
// rendering (omit_content). The message is written whole; read it with GetMessage. Not with
// IncludeRendered (INVALID_ARGUMENT).
func OmitContent() AddOption {
	return func(r *historyv1.AddMessageRequest) error { r.OmitContent = true; return nil }
}

// Request is the AddMessage request that adds in to branch.
func (in Input) Request(branch string, opts ...AddOption) (*historyv1.AddMessageRequest, error) {
	if in.err != nil {
		return nil, in.err
	}
	if in.set == nil {
		return nil, errors.New("client: empty Input: build one with Instruction, AssistantText, System, ActionRequest or ActionOutput")
	}
	r := &historyv1.AddMessageRequest{BranchId: branch}
	in.set(r)
	for _, opt := range opts {
		if err := opt(r); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	return r, nil
}

// Add adds in to branch (HistoryService.AddMessage, retried with one request_id like every
// mutation of the client) and returns the message as written.
func (c *Client) Add(ctx context.Context, branch string, in Input, opts ...AddOption) (*historyv1.Message, error) {
	req, err := in.Request(branch, opts...)
	if err != nil {
		return nil, err
	}
	resp, err := c.History.AddMessage(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetMessage(), nil
}

// jsonText writes v as JSON text. Only a json.RawMessage is taken as it is, so that a Go string is
// always a JSON string and never guessed to be JSON text.
func jsonText(v any) (string, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return "", fmt.Errorf("json.RawMessage %q is not JSON", raw)
		}
		return string(raw), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
