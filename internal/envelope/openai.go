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
	out := make([]jsonv.Value, 0, len(msgs))
	var calls []jsonv.Value // the tool calls of the ActionRequests read since the last other message
	flush := func() {
		if len(calls) > 0 {
			out = append(out, jsonv.ObjectValue(
				jsonv.Member{Key: "role", Value: jsonv.StringValue("assistant")},
				jsonv.Member{Key: "content", Value: jsonv.NullValue()},
				jsonv.Member{Key: "tool_calls", Value: jsonv.ArrayValue(calls...)},
			))
			calls = nil
		}
	}
	fits := func(i int, v jsonv.Value, extra int) bool {
		return fit == nil || fit(i, len(jsonv.Marshal(v))+1+extra)
	}
	for i, m := range msgs {
		if req, ok := m.Content.(*ActionRequestContent); ok {
			call := jsonv.ObjectValue(
				jsonv.Member{Key: "id", Value: jsonv.StringValue(m.ID.String())},
				jsonv.Member{Key: "type", Value: jsonv.StringValue("function")},
				jsonv.Member{Key: "function", Value: jsonv.ObjectValue(
					jsonv.Member{Key: "name", Value: jsonv.StringValue(req.Function)},
					jsonv.Member{Key: "arguments", Value: jsonv.StringValue(string(jsonv.Marshal(objectOrEmpty(req.Arguments))))},
				)},
			)
			extra := 0
			if len(calls) == 0 {
				extra = openAIGroupBytes
			}
			if !fits(i, call, extra) {
				flush()
				return jsonv.ArrayValue(out...), errs, i
			}
			calls = append(calls, call)
			continue
		}
		flush()
		msg, err := openAIMessage(m, renderLimit)
		if err != nil {
			errs[i] = err
			continue
		}
		if !fits(i, msg, 0) {
			return jsonv.ArrayValue(out...), errs, i
		}
		out = append(out, msg)
	}
	flush()
	return jsonv.ArrayValue(out...), errs, len(msgs)
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

// openAIContent is a rendering as the API's content: a string, or the content parts.
func openAIContent(r Rendered) jsonv.Value {
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
