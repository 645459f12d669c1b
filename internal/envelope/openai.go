package envelope

import (
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// OpenAIMessages projects messages, in order, into the `messages` array of OpenAI's Chat
// Completions API (issue 19, CHAT_FORMAT_OPENAI), rendering each within renderLimit bytes
// (RenderWithin; <= 0 is no limit). It returns the array and, parallel to msgs, the rendering
// error of each message that could not be projected (nil where it was; a *RenderTooLargeError
// past the limit); a message that fails to render is left out of the array, as chat_msg is None
// for it in LionAGI.
//
// The rules:
//   - System: {"role":"system","content":<rendered text>}.
//   - Instruction: {"role":"user","content":<rendered text>}, or, when it has images, content
//     parts: {"type":"text","text":...} then {"type":"image_url","image_url":{"url","detail"}} per
//     image (detail left out when the instruction has none).
//   - AssistantResponse: {"role":"assistant","content":<rendered text>}.
//   - Consecutive ActionRequests: one {"role":"assistant","content":null,"tool_calls":[...]} with
//     one {"id":<the request's message id>,"type":"function","function":{"name":<function>,
//     "arguments":<the arguments object as JSON text>}} per request. A request with no response
//     keeps its tool call; the API wants every tool call answered by a tool message, so a caller
//     sending the projection as it is must first append one (or drop the call).
//   - ActionResponse: {"role":"tool","tool_call_id":<its request's id>,"content":<the output as
//     JSON text>}; a failed action's content is {"error":<message>} as JSON text. A response that
//     names no request cannot be a tool message and is projected as a generic message.
//   - A message of role unset (generic content): {"role":"user","content":<rendered text>}.
//   - A rendering that is not text (a loaded non-string assistant response or plain_content,
//     Rendered.Value) is content as its JSON text.
func OpenAIMessages(msgs []*Message, renderLimit int) (jsonv.Value, []error) {
	arr, errs, _ := OpenAIMessagesWithin(msgs, renderLimit, nil)
	return arr, errs
}

// openAIGroupBytes is what the assistant message that holds a run of tool calls adds to the JSON
// text beyond the calls themselves ({"role":"assistant","content":null,"tool_calls":[]} and a
// comma), counted with the first call of the run.
const openAIGroupBytes = len(`{"role":"assistant","content":null,"tool_calls":[]},`)

// OpenAIMessagesWithin is OpenAIMessages that counts as it goes: before message i's projection
// joins the array, fit is called with i and the bytes it adds to the JSON text (its own JSON, a
// comma, and the assistant message around a run of tool calls); when fit returns false the
// projection stops there and stopped is i, else stopped is len(msgs). So a caller bounding the
// response refuses at the first message past its budget, having built no more than the budget
// (issue 11). A nil fit takes everything.
func OpenAIMessagesWithin(msgs []*Message, renderLimit int, fit func(i, n int) bool) (arr jsonv.Value, errs []error, stopped int) {
	errs = make([]error, len(msgs))
	p := NewOpenAIProjection(renderLimit)
	for i, m := range msgs {
		var f func(n int) bool
		if fit != nil {
			f = func(n int) bool { return fit(i, n) }
		}
		ok, err := p.Add(m, f)
		if err != nil {
			errs[i] = err
			continue
		}
		if !ok {
			return p.Array(), errs, i
		}
	}
	return p.Array(), errs, len(msgs)
}

// OpenAIProjection builds OpenAIMessages' array one message at a time, for a caller that is
// handed the messages as a store reads them and must not hold them all (the server's
// ToChatMessages, which counts the projection against its response budget as it grows).
type OpenAIProjection struct {
	renderLimit int
	out         []jsonv.Value
	calls       []jsonv.Value // the tool calls of the ActionRequests added since the last other message
}

// NewOpenAIProjection starts an empty projection whose messages render within renderLimit bytes.
func NewOpenAIProjection(renderLimit int) *OpenAIProjection {
	return &OpenAIProjection{renderLimit: renderLimit}
}

// flush closes a run of tool calls into its assistant message.
func (p *OpenAIProjection) flush() {
	if len(p.calls) > 0 {
		p.out = append(p.out, toolCallsMessage(p.calls))
		p.calls = nil
	}
}

func toolCallsMessage(calls []jsonv.Value) jsonv.Value {
	return jsonv.ObjectValue(
		jsonv.Member{Key: "role", Value: jsonv.StringValue("assistant")},
		jsonv.Member{Key: "content", Value: jsonv.NullValue()},
		jsonv.Member{Key: "tool_calls", Value: jsonv.ArrayValue(calls...)},
	)
}

// Add projects m after the messages added before it. Before its projection joins, fit (nil: take
// everything) is called with the bytes it adds to the JSON text, as OpenAIMessagesWithin's is;
// when fit returns false nothing is added and ok is false: the caller stops there. A message that
// cannot be rendered is left out with its error (fit is not called), as chat_msg is None for it.
func (p *OpenAIProjection) Add(m *Message, fit func(n int) bool) (ok bool, err error) {
	fits := func(v jsonv.Value, extra int) bool {
		return fit == nil || fit(len(jsonv.Marshal(v))+1+extra)
	}
	if req, isReq := m.Content.(*ActionRequestContent); isReq {
		call := jsonv.ObjectValue(
			jsonv.Member{Key: "id", Value: jsonv.StringValue(m.ID.String())},
			jsonv.Member{Key: "type", Value: jsonv.StringValue("function")},
			jsonv.Member{Key: "function", Value: jsonv.ObjectValue(
				jsonv.Member{Key: "name", Value: jsonv.StringValue(req.Function)},
				jsonv.Member{Key: "arguments", Value: jsonv.StringValue(string(jsonv.Marshal(objectOrEmpty(req.Arguments))))},
			)},
		)
		extra := 0
		if len(p.calls) == 0 {
			extra = openAIGroupBytes
		}
		if !fits(call, extra) {
			return false, nil
		}
		p.calls = append(p.calls, call)
		return true, nil
	}
	p.flush()
	msg, err := openAIMessage(m, p.renderLimit)
	if err != nil {
		return true, err
	}
	if !fits(msg, 0) {
		return false, nil
	}
	p.out = append(p.out, msg)
	return true, nil
}

// Array returns the projection of the messages added so far (a run of tool calls at the end
// closed into its assistant message); Add may go on after it.
func (p *OpenAIProjection) Array() jsonv.Value {
	out := p.out
	if len(p.calls) > 0 {
		out = append(out[:len(out):len(out)], toolCallsMessage(p.calls))
	}
	return jsonv.ArrayValue(out...)
}

// openAIMessage is the projection of one message other than an ActionRequest.
func openAIMessage(m *Message, renderLimit int) (jsonv.Value, error) {
	if res, ok := m.Content.(*ActionResponseContent); ok && res.ActionRequestID != nil {
		output := res.Output
		if res.Error != nil {
			output = jsonv.ObjectValue(jsonv.Member{Key: "error", Value: jsonv.StringValue(*res.Error)})
		}
		return jsonv.ObjectValue(
			jsonv.Member{Key: "role", Value: jsonv.StringValue("tool")},
			jsonv.Member{Key: "tool_call_id", Value: jsonv.StringValue(*res.ActionRequestID)},
			jsonv.Member{Key: "content", Value: jsonv.StringValue(string(jsonv.Marshal(output)))},
		), nil
	}
	r, err := m.RenderWithin(renderLimit)
	if err != nil {
		return jsonv.Value{}, err
	}
	role := "user" // Instruction, and generic content (role unset)
	switch m.Kind() {
	case KindSystem:
		role = "system"
	case KindAssistantResponse:
		role = "assistant"
	}
	return jsonv.ObjectValue(
		jsonv.Member{Key: "role", Value: jsonv.StringValue(role)},
		jsonv.Member{Key: "content", Value: openAIContent(r)},
	), nil
}

// openAIContent is a rendering as the API's content: a string, or the content parts; a rendering
// that is not text (Rendered.Value) is its JSON text, as a tool's output is.
func openAIContent(r Rendered) jsonv.Value {
	if r.Value != nil {
		return jsonv.StringValue(string(jsonv.Marshal(*r.Value)))
	}
	if !r.IsParts() {
		return jsonv.StringValue(r.Text)
	}
	parts := make([]jsonv.Value, len(r.Parts))
	for i, p := range r.Parts {
		if p.Type != "image_url" {
			parts[i] = jsonv.ObjectValue(
				jsonv.Member{Key: "type", Value: jsonv.StringValue("text")},
				jsonv.Member{Key: "text", Value: jsonv.StringValue(p.Text)},
			)
			continue
		}
		image := []jsonv.Member{{Key: "url", Value: jsonv.StringValue(p.ImageURL)}}
		if p.Detail != "" {
			image = append(image, jsonv.Member{Key: "detail", Value: jsonv.StringValue(p.Detail)})
		}
		parts[i] = jsonv.ObjectValue(
			jsonv.Member{Key: "type", Value: jsonv.StringValue("image_url")},
			jsonv.Member{Key: "image_url", Value: jsonv.ObjectValue(image...)},
		)
	}
	return jsonv.ArrayValue(parts...)
}
