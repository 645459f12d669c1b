package envelope_test

import (
	"fmt"
	"strings"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

// replayScenario runs the "update" group's scenarios: Message.update,
// content updates and AssistantResponse.from_response, step by step.
func replayScenario(r vectors.Record) string {
	steps, _ := r.Input.Get("steps")
	vars := map[string]*envelope.Message{}
	var results []jsonv.Value
	for _, step := range steps.Elems() {
		entry := []jsonv.Member{}
		res, err := runStep(step, vars)
		if err != nil {
			entry = append(entry, jsonv.Member{Key: "error", Value: obj("type", jsonv.StringValue("Error"), "message", jsonv.StringValue(err.Error()))})
		} else {
			entry = append(entry, jsonv.Member{Key: "result", Value: res})
		}
		if reads, ok := step.Get("read"); ok {
			var rs []jsonv.Member
			for _, p := range reads.Elems() {
				path, _ := p.Str()
				rs = append(rs, jsonv.Member{Key: path, Value: readPath(path, vars)})
			}
			entry = append(entry, jsonv.Member{Key: "read", Value: jsonv.ObjectValue(rs...)})
		}
		results = append(results, jsonv.ObjectValue(entry...))
	}
	return matchSteps(setAsideKept(r.Want(), false), setAsideKept(jsonv.ArrayValue(results...), true))
}

// matchSteps compares step by step; an expected error matches any error
// (its Python type and text are LionAGI's), and a placeholder standing for a
// whole step result ("<i>") matches that result's id.
func matchSteps(want, got jsonv.Value) string {
	if want.Len() != got.Len() {
		return fmt.Sprintf("want %d steps, got %d", want.Len(), got.Len())
	}
	m := vectors.NewMatcher()
	for i, w := range want.Elems() {
		g := got.Elems()[i]
		if w.Has("error") != g.Has("error") {
			return fmt.Sprintf("step %d: want %s, got %s", i, w, g)
		}
		if res, ok := w.Get("result"); ok {
			gr, _ := g.Get("result")
			if s, isStr := res.Str(); isStr && vectors.IsPlaceholder(s) && gr.Kind() == jsonv.Object {
				gr, _ = gr.Get("id")
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

func runStep(step jsonv.Value, vars map[string]*envelope.Message) (jsonv.Value, error) {
	as := str(step, "as")
	switch {
	case step.Has("new"):
		kwargs, _ := step.Get("kwargs")
		m, err := envelope.New(kindByName[str(step, "new")], kwargs)
		if err != nil {
			return jsonv.Value{}, err
		}
		vars[as] = m
		return summary(m), nil
	case step.Has("static"):
		if str(step, "static") != "AssistantResponse" || str(step, "call") != "from_response" {
			return jsonv.Value{}, fmt.Errorf("test harness: unsupported static call %s", step)
		}
		args, _ := step.Get("args")
		m, err := envelope.FromResponse(args.Elems()[0], nil, nil)
		if err != nil {
			return jsonv.Value{}, err
		}
		vars[as] = m
		return summary(m), nil
	case step.Has("on"):
		m := vars[str(step, "on")]
		if m == nil {
			return jsonv.Value{}, fmt.Errorf("unbound variable %s", str(step, "on"))
		}
		if call := str(step, "call"); call != "update" {
			return jsonv.Value{}, fmt.Errorf("test harness: unsupported call %s", call)
		}
		kwargs, _ := step.Get("kwargs")
		updated, err := m.Update(kwargs)
		if err != nil {
			return jsonv.Value{}, err
		}
		vars[str(step, "on")] = updated
		return jsonv.NullValue(), nil
	}
	return jsonv.Value{}, fmt.Errorf("test harness: unsupported step %s", step)
}

// summary is the vectors' step result for a message.
func summary(m *envelope.Message) jsonv.Value {
	ch := jsonv.NullValue()
	if m.Channel != nil {
		ch = jsonv.StringValue(*m.Channel)
	}
	return obj("id", jsonv.StringValue(m.ID.String()), "class", jsonv.StringValue(m.Kind().String()),
		"sender", m.Sender.JSON(), "recipient", m.Recipient.JSON(), "channel", ch, "content", m.Content.Dict())
}

func readPath(path string, vars map[string]*envelope.Message) jsonv.Value {
	parts := strings.Split(path, ".")
	m := vars[parts[0]]
	if m == nil {
		return obj("error", jsonv.StringValue("KeyError"))
	}
	switch strings.Join(parts[1:], ".") {
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
	case "content":
		return m.Content.Dict()
	case "content.to_dict":
		return m.Content.Dict()
	}
	if len(parts) == 3 && parts[1] == "content" {
		v, _ := m.Content.Dict().Get(parts[2])
		return v
	}
	return obj("error", jsonv.StringValue("test harness: unknown path "+path))
}
