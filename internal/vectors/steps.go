package vectors

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// The scenario records' step language (vectors/README.md, "Scenario steps") is replayed by the
// conformance tests of envelope, store and server; what they share is here.

// Obj builds a JSON object from alternating keys (strings) and values (jsonv.Values).
func Obj(kv ...any) jsonv.Value {
	ms := make([]jsonv.Member, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ms = append(ms, jsonv.Member{Key: kv[i].(string), Value: kv[i+1].(jsonv.Value)})
	}
	return jsonv.ObjectValue(ms...)
}

// IDs is a Progression or Pile step result: the ids, in order, as UUID text.
func IDs(ids []uuid.UUID) jsonv.Value {
	out := make([]jsonv.Value, len(ids))
	for i, id := range ids {
		out[i] = jsonv.StringValue(id.String())
	}
	return jsonv.ArrayValue(out...)
}

// Summary is a step result for a message: {id, class, sender, recipient, channel, content}.
func Summary(m *envelope.Message) jsonv.Value {
	ch := jsonv.NullValue()
	if m.Channel != nil {
		ch = jsonv.StringValue(*m.Channel)
	}
	return Obj("id", jsonv.StringValue(m.ID.String()), "class", jsonv.StringValue(m.Kind().String()),
		"sender", m.Sender.JSON(), "recipient", m.Recipient.JSON(), "channel", ch, "content", m.Content.Dict())
}

// MessagePath reads an attribute path of a message as the records' `read` lists name it
// ("sender", "content.prompt_context", "rendered", "chat_msg", ...); a path it does not know reads
// as {"error": ...}, which no recorded value matches.
func MessagePath(m *envelope.Message, path string) jsonv.Value {
	switch path {
	case "sender":
		return m.Sender.JSON()
	case "recipient":
		return m.Recipient.JSON()
	case "metadata":
		return m.Metadata
	case "rendered":
		r, err := m.Render()
		if err != nil {
			return jsonv.NullValue()
		}
		return r.JSON()
	case "chat_msg":
		c, err := m.ChatMsg()
		if err != nil {
			return jsonv.NullValue()
		}
		return c.JSON()
	case "content", "content.to_dict":
		return m.Content.Dict()
	case "is_responded", "content.is_responded":
		rc, ok := m.Content.(*envelope.ActionRequestContent)
		return jsonv.BoolValue(ok && rc.IsResponded())
	}
	if field, ok := strings.CutPrefix(path, "content."); ok {
		v, _ := m.Content.Dict().Get(field)
		return v
	}
	return Obj("error", jsonv.StringValue("test harness: unknown path "+path))
}

// MatchSteps compares a scenario's steps with the recorded ones and returns "" when they match.
// An expected error matches any error (its type and text are Python's), but the number of
// sub-exceptions of an exception group must agree; a placeholder standing for a whole result ("<i>")
// matches that result's id; a read of a variable the record never bound is ignored (the README says
// so); subset compares only the keys the expected result names (for partial historyd_output).
func MatchSteps(want, got jsonv.Value, subset bool) string {
	if want.Len() != got.Len() {
		return fmt.Sprintf("want %d steps, got %d: %s", want.Len(), got.Len(), got)
	}
	m := NewMatcher()
	for i, w := range want.Elems() {
		g := got.Elems()[i]
		if w.Has("error") != g.Has("error") {
			return fmt.Sprintf("step %d: want %s, got %s", i, w, g)
		}
		if we, ok := w.Get("error"); ok {
			if wx, has := we.Get("exceptions"); has {
				ge, _ := g.Get("error")
				gx, _ := ge.Get("exceptions")
				if wx.Len() != gx.Len() {
					return fmt.Sprintf("step %d: want %d failures, got %s", i, wx.Len(), ge)
				}
			}
		}
		if res, ok := w.Get("result"); ok {
			gr, _ := g.Get("result")
			if s, isStr := res.Str(); isStr && IsPlaceholder(s) && gr.Kind() == jsonv.Object {
				gr, _ = gr.Get("id")
			}
			if subset {
				gr = onlyKeysOf(res, gr)
			}
			if d := m.Match(res, gr); d != "" {
				return fmt.Sprintf("step %d result: %s", i, d)
			}
		}
		if rd, ok := w.Get("read"); ok {
			gr, _ := g.Get("read")
			for _, mem := range rd.Members() {
				if e, isObj := mem.Value.Get("error"); isObj && !e.IsNull() {
					continue // a read of a variable never bound (README: ignore)
				}
				gv, _ := gr.Get(mem.Key)
				if d := m.Match(mem.Value, gv); d != "" {
					return fmt.Sprintf("step %d read %s: %s", i, mem.Key, d)
				}
			}
		}
	}
	return ""
}

// onlyKeysOf keeps the keys of got that want names.
func onlyKeysOf(want, got jsonv.Value) jsonv.Value {
	if want.Kind() != jsonv.Object || got.Kind() != jsonv.Object {
		return got
	}
	var ms []jsonv.Member
	for _, w := range want.Members() {
		if v, ok := got.Get(w.Key); ok {
			ms = append(ms, jsonv.Member{Key: w.Key, Value: v})
		}
	}
	return jsonv.ObjectValue(ms...)
}
