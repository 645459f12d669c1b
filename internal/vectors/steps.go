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

// Error kinds: how historyd classifies an error, named by the gRPC code server/errors.go maps it to
// (KindObservers is the Go API's ObserverError, which no RPC returns). A harness writes a step error
// as {"type": <kind>, "message": <historyd's text>}.
const (
	KindInvalid   = "INVALID_ARGUMENT"
	KindNotFound  = "NOT_FOUND"
	KindExists    = "ALREADY_EXISTS"
	KindObservers = "OBSERVERS"
)

// pythonKinds maps the exception types LionAGI 0.27 raises in the scenario records to the kind
// historyd gives the same failure (issue 13 item 8). A recorded type missing here fails the match:
// every type must be mapped on purpose.
var pythonKinds = map[string]string{
	"ValueError": KindInvalid, "ValidationError": KindInvalid, "TypeError": KindInvalid,
	"KeyError": KindNotFound, "NotFoundError": KindNotFound,
	"ExistsError": KindExists, "ExceptionGroup": KindObservers,
	"ImportError": KindInvalid, // an unknown lion_class: historyd's UNKNOWN_LION_CLASS, loading nothing
}

// textKinds are the ValueErrors that historyd classifies by what they say rather than by type:
// an owner that is not registered is a state of the Exchange, FAILED_PRECONDITION with reason
// OWNER_NOT_REGISTERED (docs/design.md#errors), not a malformed input.
// An owner registered twice is ALREADY_EXISTS (OWNER_ALREADY_REGISTERED).
var textKinds = map[string]string{" not registered": "FAILED_PRECONDITION", " already registered": KindExists}

// keptTexts are the exception types whose recorded message is LionAGI's own text (a `raise
// ValueError("...")` in its code, or a hook's own error), which historyd keeps (ADR-0006 D3): the
// historyd message must contain it. The others carry Python's or pydantic's wording
// ("1 validation error for Instruction", "'UUID' object is not iterable", KeyError's repr).
var keptTexts = map[string]bool{"ValueError": true, "RuntimeError": true}

// pythonWorded are recorded ValueError messages that Python itself wrote, not LionAGI (a tuple
// unpacking inside its lion_class lookup): the kind is compared, the text is not.
var pythonWorded = map[string]bool{"not enough values to unpack (expected 2, got 1)": true}

// MatchError compares a recorded error {type, message[, exceptions]} with the one a harness wrote
// (see the kinds above) and returns "" when they agree: the kind always, the message where
// keptTexts says historyd keeps it, and an exception group's sub-exceptions one by one.
func MatchError(want, got jsonv.Value) string {
	wt, _ := want.Get("type")
	wtype, _ := wt.Str()
	gt, _ := got.Get("type")
	gtype, _ := gt.Str()
	kind, ok := pythonKinds[wtype]
	wm, _ := want.Get("message")
	wmsg, _ := wm.Str()
	for text, k := range textKinds {
		if wtype == "ValueError" && strings.Contains(wmsg, text) {
			kind = k
		}
	}
	if !ok {
		return fmt.Sprintf("recorded error type %q has no historyd kind (vectors.pythonKinds)", wtype)
	}
	if kind != gtype {
		return fmt.Sprintf("want a %s error (LionAGI %s), got %s", kind, wtype, got)
	}
	if keptTexts[wtype] && !pythonWorded[wmsg] {
		gm, _ := got.Get("message")
		gmsg, _ := gm.Str()
		if !strings.Contains(gmsg, wmsg) {
			return fmt.Sprintf("want the message %q, got %q", wmsg, gmsg)
		}
	}
	if wx, has := want.Get("exceptions"); has {
		gx, _ := got.Get("exceptions")
		if wx.Len() != gx.Len() {
			return fmt.Sprintf("want %d failures, got %s", wx.Len(), got)
		}
		for i, w := range wx.Elems() {
			wt, _ := w.Get("type")
			typ, _ := wt.Str()
			if !keptTexts[typ] {
				continue
			}
			wm, _ := w.Get("message")
			wmsg, _ := wm.Str()
			gm, _ := gx.Elems()[i].Get("message")
			if gmsg, _ := gm.Str(); !strings.Contains(gmsg, wmsg) {
				return fmt.Sprintf("failure %d: want the message %q, got %q", i, wmsg, gmsg)
			}
		}
	}
	return ""
}

// MatchSteps compares a scenario's steps with the recorded ones and returns "" when they match.
// An expected error must be matched by an error of the same kind, with LionAGI's message where
// historyd keeps it (MatchError); a placeholder standing for a whole result ("<i>")
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
			ge, _ := g.Get("error")
			if d := MatchError(we, ge); d != "" {
				return fmt.Sprintf("step %d error: %s", i, d)
			}
		}
		if res, ok := w.Get("result"); ok {
			gr, has := g.Get("result")
			if !has { // a missing result is not null (issue 13 item 12)
				return fmt.Sprintf("step %d: want result %s, got none: %s", i, res, g)
			}
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
				if isKeyError(mem.Value) {
					continue // a read of a variable never bound (README: ignore)
				}
				gv, has := gr.Get(mem.Key)
				if !has { // a missing read is not null (issue 13 item 12)
					return fmt.Sprintf("step %d: read %s missing (want %s)", i, mem.Key, mem.Value)
				}
				if d := m.Match(mem.Value, gv); d != "" {
					return fmt.Sprintf("step %d read %s: %s", i, mem.Key, d)
				}
			}
		}
	}
	return ""
}

// isKeyError reports the recorded read of a variable never bound: {"error": {"type": "KeyError",
// ...}} (or {"error": "KeyError"} in a harness's own step list). Only these reads may be skipped.
func isKeyError(v jsonv.Value) bool {
	e, ok := v.Get("error")
	if !ok || v.Len() != 1 {
		return false
	}
	if s, isStr := e.Str(); isStr {
		return s == "KeyError"
	}
	t, _ := e.Get("type")
	s, _ := t.Str()
	return s == "KeyError"
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
