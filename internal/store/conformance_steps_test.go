package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/vectors"
)

// The scenario interpreter: it runs the vectors' step language (vectors
// README) over historyd's Go API. A MessageManager or Branch is a branch of
// a store.Memory; a message bound to a name is read back from its branch
// when it is in one (LionAGI mutates the object; historyd's messages are
// values, so the branch holds the current one).

// manager is a bound MessageManager or Branch.
type manager struct {
	id     uuid.UUID
	branch bool // a Branch (its step result is {id, class: Branch})
}

// msgVar is a bound message: its value, and the branch holding it, if any.
type msgVar struct {
	msg    *envelope.Message
	branch *uuid.UUID
}

// hooksVar is a bound on_message_added list.
type hooksVar struct{ branch uuid.UUID }

type interp struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Memory
	vars  map[string]any
	fired []jsonv.Value
}

func replayScenario(t *testing.T, r vectors.Record) jsonv.Value {
	steps, _ := r.Input.Get("steps")
	in := &interp{t: t, ctx: context.Background(), st: store.NewMemory(), vars: map[string]any{}}
	var out []jsonv.Value
	for _, step := range steps.Elems() {
		var entry []jsonv.Member
		res, err := in.step(step)
		if err != nil {
			entry = append(entry, jsonv.Member{Key: "error", Value: errorJSON(err)})
		} else {
			entry = append(entry, jsonv.Member{Key: "result", Value: res})
		}
		if reads, ok := step.Get("read"); ok {
			var rs []jsonv.Member
			for _, p := range reads.Elems() {
				path, _ := p.Str()
				rs = append(rs, jsonv.Member{Key: path, Value: in.read(path)})
			}
			entry = append(entry, jsonv.Member{Key: "read", Value: jsonv.ObjectValue(rs...)})
		}
		out = append(out, jsonv.ObjectValue(entry...))
	}
	return jsonv.ArrayValue(out...)
}

// errorJSON writes an error as the vectors package's MatchError reads it:
// its kind (the gRPC code internal/server maps the sentinel to) and its
// text; an observer failure lists its failures as an exception group's
// sub-exceptions.
func errorJSON(err error) jsonv.Value {
	e := []jsonv.Member{{Key: "type", Value: jsonv.StringValue(errorKind(err))}, {Key: "message", Value: jsonv.StringValue(err.Error())}}
	var oe *store.ObserverError
	if errors.As(err, &oe) {
		subs := make([]jsonv.Value, len(oe.Errs))
		for i, s := range oe.Errs {
			subs[i] = jsonv.ObjectValue(jsonv.Member{Key: "message", Value: jsonv.StringValue(s.Error())})
		}
		e = append(e, jsonv.Member{Key: "exceptions", Value: jsonv.ArrayValue(subs...)})
	}
	return jsonv.ObjectValue(e...)
}

// errorKind classifies a store error by its sentinel as internal/server's
// toStatus does (issue 13 item 8); anything unclassified is INTERNAL, which
// no recorded error matches.
func errorKind(err error) string {
	var oe *store.ObserverError
	switch {
	case errors.As(err, &oe):
		return vectors.KindObservers
	case errors.Is(err, envelope.ErrInvalid):
		return vectors.KindInvalid
	case errors.Is(err, store.ErrBranchNotFound), errors.Is(err, store.ErrMessageNotFound):
		return vectors.KindNotFound
	case errors.Is(err, store.ErrBranchExists):
		return vectors.KindExists
	}
	return "INTERNAL"
}

func str(v jsonv.Value, key string) string {
	x, _ := v.Get(key)
	s, _ := x.Str()
	return s
}

var kindByName = map[string]envelope.Kind{
	"Message": envelope.KindGeneric, "System": envelope.KindSystem, "Instruction": envelope.KindInstruction,
	"AssistantResponse": envelope.KindAssistantResponse, "ActionRequest": envelope.KindActionRequest,
	"ActionResponse": envelope.KindActionResponse,
}

func (in *interp) step(step jsonv.Value) (jsonv.Value, error) {
	switch {
	case step.Has("fired"):
		log := jsonv.ArrayValue(in.fired...)
		in.fired = nil
		return log, nil
	case step.Has("new"):
		return in.newStep(step)
	case step.Has("static"):
		return in.staticStep(step)
	case step.Has("on") && step.Has("get"):
		return in.getStep(step)
	case step.Has("on"):
		return in.callStep(step)
	}
	return jsonv.Value{}, fmt.Errorf("test harness: unsupported step %s", step)
}

func (in *interp) newStep(step jsonv.Value) (jsonv.Value, error) {
	class, as := str(step, "new"), str(step, "as")
	kwargs, _ := step.Get("kwargs")
	switch class {
	case "MessageManager":
		id, err := in.newManager(kwargs)
		if err != nil {
			return jsonv.Value{}, err
		}
		in.bind(as, &manager{id: id})
		return in.progressionResult(id)
	case "Branch":
		ci := store.CreateBranchInput{}
		if v, ok := kwargs.Get("system"); ok {
			ci.System = v
		}
		if v, ok := kwargs.Get("system_datetime"); ok {
			ci.SystemDatetime = v
		}
		if v, ok := kwargs.Get("user"); ok {
			s, _ := v.Str()
			ci.User = &s
		}
		res, err := in.st.CreateBranch(in.ctx, ci)
		if err != nil {
			return jsonv.Value{}, err
		}
		in.bind(as, &manager{id: res.Branch.ID, branch: true})
		return branchResult(res.Branch.ID), nil
	case "Progression":
		var order []uuid.UUID
		if o, ok := kwargs.Get("order"); ok {
			for _, e := range o.Elems() {
				order = append(order, in.uuidArg(e))
			}
		}
		var name *string
		if n, ok := kwargs.Get("name"); ok {
			s, _ := n.Str()
			name = &s
		}
		p := store.NewProgression(order, name)
		in.bind(as, p)
		return vectors.IDs(p.Order), nil
	}
	k, ok := kindByName[class]
	if !ok {
		return jsonv.Value{}, fmt.Errorf("test harness: cannot construct %s", class)
	}
	m, err := envelope.New(k, in.resolveJSON(kwargs))
	if err != nil {
		return jsonv.Value{}, err
	}
	in.bind(as, &msgVar{msg: m})
	return vectors.Summary(m), nil
}

// newManager maps MessageManager(messages=, system=): the messages go in
// through ImportBranch (a list of message dicts, where D3 ignores
// non-message entries), then the system through SetSystem.
func (in *interp) newManager(kwargs jsonv.Value) (uuid.UUID, error) {
	var id uuid.UUID
	if msgs, ok := kwargs.Get("messages"); ok {
		res, err := in.st.ImportBranch(in.ctx, store.ImportInput{Data: in.resolveJSON(msgs)})
		if err != nil {
			return uuid.UUID{}, err
		}
		id = res.Branch.ID
	} else {
		res, err := in.st.CreateBranch(in.ctx, store.CreateBranchInput{})
		if err != nil {
			return uuid.UUID{}, err
		}
		id = res.Branch.ID
	}
	if sv, ok := kwargs.Get("system"); ok {
		if m := in.messageArg(sv); m != nil {
			if _, err := in.st.SetSystem(in.ctx, id, m, store.WriteOptions{}); err != nil {
				return uuid.UUID{}, err
			}
		} else {
			// Text: historyd's one constructor is the Branch's (see stepDifferences).
			res, err := in.st.CreateBranch(in.ctx, store.CreateBranchInput{System: sv})
			if err != nil {
				return uuid.UUID{}, err
			}
			id = res.Branch.ID
		}
	}
	return id, nil
}

func (in *interp) staticStep(step jsonv.Value) (jsonv.Value, error) {
	class, call, as := str(step, "static"), str(step, "call"), str(step, "as")
	kwargs, _ := step.Get("kwargs")
	args, _ := step.Get("args")
	if class == "Progression" && call == "from_dict" {
		p, err := store.ParseProgression(args.Elems()[0])
		if err != nil {
			return jsonv.Value{}, err
		}
		in.bind(as, p)
		return vectors.IDs(p.Order), nil
	}
	if class != "MessageManager" {
		return jsonv.Value{}, fmt.Errorf("test harness: unsupported static %s.%s", class, call)
	}
	f, refs := in.factory(kwargs, nil)
	var (
		m   *envelope.Message
		err error
	)
	switch call {
	case "create_message":
		var c store.Created
		c, err = store.CreateMessage(&f)
		m = c.Message
		in.rebind(refs, c.Request)
	case "create_instruction":
		m, err = store.CreateInstruction(&f)
	case "create_system":
		m, err = store.CreateSystem(&f)
	case "create_action_response":
		var c store.Created
		c, err = store.CreateActionResponse(&f)
		m = c.Message
		in.rebind(refs, c.Request)
	default:
		return jsonv.Value{}, fmt.Errorf("test harness: unsupported static %s.%s", class, call)
	}
	if err != nil {
		return jsonv.Value{}, err
	}
	in.rebind(refs, m)
	if as != "" {
		in.bind(as, &msgVar{msg: m})
	}
	return vectors.Summary(m), nil
}

// rebind points the names of the messages a static call was given at the
// values it returned with the same id (LionAGI changes those objects).
func (in *interp) rebind(refs map[string]bool, m *envelope.Message) {
	if m == nil {
		return
	}
	for name := range refs {
		if v, ok := in.vars[name].(*msgVar); ok && v.msg.ID == m.ID {
			v.msg = m
		}
	}
}

func (in *interp) getStep(step jsonv.Value) (jsonv.Value, error) {
	on, attr, as := str(step, "on"), str(step, "get"), str(step, "as")
	mg, ok := in.vars[on].(*manager)
	if !ok {
		return jsonv.Value{}, fmt.Errorf("test harness: get %s on %T", attr, in.vars[on])
	}
	views := map[string]store.View{
		"instructions": store.ViewInstructions, "assistant_responses": store.ViewAssistantResponses,
		"actions": store.ViewActions, "action_requests": store.ViewActionRequests, "action_responses": store.ViewActionResponses,
	}
	switch attr {
	case "_on_message_added", "on_message_added":
		in.bind(as, &hooksVar{branch: mg.id})
		return jsonv.ArrayValue(), nil
	case "msgs":
		in.bind(as, &manager{id: mg.id})
		return in.progressionResult(mg.id)
	case "progression", "messages":
		return in.order(mg.id), nil
	case "last_instruction", "last_response":
		view := store.ViewInstructions
		if attr == "last_response" {
			view = store.ViewAssistantResponses
		}
		sm, found, err := in.st.LastMessage(in.ctx, mg.id, view)
		if err != nil || !found {
			return jsonv.NullValue(), err
		}
		return vectors.Summary(sm.Message), nil
	}
	if view, ok := views[attr]; ok {
		page, err := in.st.ListMessages(in.ctx, mg.id, store.ListInput{View: view, PageSize: store.MaxPageSize})
		if err != nil {
			return jsonv.Value{}, err
		}
		ids := make([]jsonv.Value, len(page.Messages))
		for i, sm := range page.Messages {
			ids[i] = jsonv.StringValue(sm.Message.ID.String())
		}
		return jsonv.ArrayValue(ids...), nil
	}
	return jsonv.Value{}, fmt.Errorf("test harness: unsupported get %s", attr)
}

func (in *interp) callStep(step jsonv.Value) (jsonv.Value, error) {
	on, call, as := str(step, "on"), str(step, "call"), str(step, "as")
	args, _ := step.Get("args")
	kwargs, _ := step.Get("kwargs")
	switch v := in.vars[on].(type) {
	case *manager:
		return in.managerCall(v, call, as, args, kwargs)
	case *hooksVar:
		if call != "extend" {
			return jsonv.Value{}, fmt.Errorf("test harness: hooks.%s", call)
		}
		for _, h := range args.Elems()[0].Elems() {
			spec, _ := h.Get("$hook")
			if _, err := in.st.Observe(v.branch, in.hook(spec)); err != nil {
				return jsonv.Value{}, err
			}
		}
		return jsonv.NullValue(), nil
	}
	return jsonv.Value{}, fmt.Errorf("test harness: call %s on %T", call, in.vars[on])
}
