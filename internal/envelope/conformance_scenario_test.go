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
			entry = append(entry, jsonv.Member{Key: "error", Value: errorJSON(err)})
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
	return vectors.MatchSteps(setAsideKept(r.Want(), false), setAsideKept(jsonv.ArrayValue(results...), true), false)
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
		return vectors.Summary(m), nil
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
		return vectors.Summary(m), nil
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

func readPath(path string, vars map[string]*envelope.Message) jsonv.Value {
	name, rest, _ := strings.Cut(path, ".")
	m := vars[name]
	if m == nil {
		return obj("error", jsonv.StringValue("KeyError"))
	}
	return vectors.MessagePath(m, rest)
}
