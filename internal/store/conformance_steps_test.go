package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// errorJSON writes an error as the vectors do; an observer failure lists
// its failures as an exception group's sub-exceptions.
func errorJSON(err error) jsonv.Value {
	e := []jsonv.Member{{Key: "type", Value: jsonv.StringValue("Error")}, {Key: "message", Value: jsonv.StringValue(err.Error())}}
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
		return idList(p.Order), nil
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
	return summary(m), nil
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
		return idList(p.Order), nil
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
		c, err = store.CreateMessage(f)
		m = c.Message
		in.rebind(refs, c.Request)
	case "create_instruction":
		m, err = store.CreateInstruction(f)
	case "create_system":
		m, err = store.CreateSystem(f)
	case "create_action_response":
		var c store.Created
		c, err = store.CreateActionResponse(f)
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
	return summary(m), nil
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
		return summary(sm.Message), nil
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
	case *store.Progression:
		return in.progressionCall(v, call, args)
	}
	return jsonv.Value{}, fmt.Errorf("test harness: call %s on %T", call, in.vars[on])
}

func (in *interp) managerCall(mg *manager, call, as string, args, kwargs jsonv.Value) (jsonv.Value, error) {
	switch call {
	case "add_message", "a_add_message":
		res, err := in.addMessage(mg.id, kwargs)
		if res.Message.Message == nil {
			return jsonv.Value{}, err
		}
		if as != "" {
			id := mg.id
			in.bind(as, &msgVar{msg: res.Message.Message, branch: &id})
		}
		if err != nil { // committed, but observers failed (ADR-0006 D4)
			return jsonv.Value{}, err
		}
		return summary(res.Message.Message), nil
	case "set_system":
		m := in.messageArg(args.Elems()[0])
		_, err := in.st.SetSystem(in.ctx, mg.id, m, store.WriteOptions{})
		in.adopt(m, mg.id)
		return jsonv.NullValue(), err
	case "clear_messages":
		_, err := in.st.ClearMessages(in.ctx, mg.id, store.WriteOptions{})
		return jsonv.NullValue(), err
	case "to_chat_msgs":
		ci := store.ChatInput{}
		if p, ok := kwargs.Get("progression"); ok {
			ids := []uuid.UUID{}
			for _, e := range p.Elems() {
				id, ok := in.idArg(e)
				if !ok {
					return jsonv.Value{}, fmt.Errorf("%s (%s is not an id)", store.InvalidProgressionMessage, e)
				}
				ids = append(ids, id)
			}
			ci.Order = &ids
		}
		res, err := in.st.ToChatMessages(in.ctx, mg.id, ci)
		if err != nil {
			return jsonv.Value{}, err
		}
		out := make([]jsonv.Value, len(res.Entries))
		for i, e := range res.Entries {
			out[i] = e.Chat.JSON()
		}
		return jsonv.ArrayValue(out...), nil
	case "__contains__":
		m := in.messageArg(args.Elems()[0])
		_, err := in.st.GetMessage(in.ctx, mg.id, m.ID)
		return jsonv.BoolValue(err == nil), nil
	case "__bool__":
		b, err := in.st.GetBranch(in.ctx, mg.id)
		return jsonv.BoolValue(b.MessageCount > 0), err
	case "clone":
		res, err := in.st.ForkBranch(in.ctx, store.ForkInput{Source: mg.id})
		if err != nil {
			return jsonv.Value{}, err
		}
		in.bind(as, &manager{id: res.Branch.ID, branch: true})
		return branchResult(res.Branch.ID), nil
	}
	return jsonv.Value{}, fmt.Errorf("test harness: unsupported call %s", call)
}

// addMessage maps add_message's keyword arguments onto AddMessage: a bound
// message that is in the branch is named by id (as the target, or as the
// request an action output answers); any other is passed as a value.
func (in *interp) addMessage(branch uuid.UUID, kwargs jsonv.Value) (store.WriteResult, error) {
	ai := store.AddInput{}
	f, _ := in.factory(kwargs, func(key string, v *msgVar) bool {
		if v.branch == nil || *v.branch != branch {
			return false
		}
		id := v.msg.ID
		if key == "action_request" && kwargs.Has("action_output") {
			ai.ActionRequest = &id
		} else {
			ai.Target = &id
		}
		return true
	})
	ai.Factory = f
	res, err := in.st.AddMessage(in.ctx, branch, ai, store.WriteOptions{})
	if res.Message.Message != nil {
		for _, v := range in.vars {
			if mv, ok := v.(*msgVar); ok && mv.branch == nil {
				in.adopt(mv.msg, branch)
			}
		}
	}
	return res, err
}

// adopt marks a free message as held by a branch once the branch has it.
func (in *interp) adopt(m *envelope.Message, branch uuid.UUID) {
	if m == nil {
		return
	}
	if _, err := in.st.GetMessage(in.ctx, branch, m.ID); err != nil {
		return
	}
	for _, v := range in.vars {
		if mv, ok := v.(*msgVar); ok && mv.branch == nil && mv.msg.ID == m.ID {
			id := branch
			mv.branch = &id
		}
	}
}

// factory maps create_message's keyword arguments onto store.Factory. A
// message argument goes to byID when it returns true, else into the
// factory's message slot. It returns the names of the messages given.
func (in *interp) factory(kwargs jsonv.Value, byID func(key string, v *msgVar) bool) (store.Factory, map[string]bool) {
	f := store.Factory{}
	refs := map[string]bool{}
	slots := map[string]**envelope.Message{
		"instruction": &f.InstructionMsg, "system": &f.SystemMsg, "assistant_response": &f.AssistantMsg,
		"action_request": &f.ActionRequestMsg, "action_response": &f.ActionResponseMsg,
	}
	values := map[string]*jsonv.Value{
		"sender": &f.Sender, "recipient": &f.Recipient, "metadata": &f.Metadata, "instruction": &f.Instruction,
		"context": &f.Context, "guidance": &f.Guidance, "plain_content": &f.PlainContent,
		"response_format": &f.ResponseFormat, "images": &f.Images, "image_detail": &f.ImageDetail,
		"tool_schemas": &f.ToolSchemas, "system": &f.System, "system_datetime": &f.SystemDatetime,
		"assistant_response": &f.AssistantResponse, "action_function": &f.ActionFunction,
		"action_arguments": &f.ActionArguments, "action_output": &f.ActionOutput,
	}
	for _, mem := range kwargs.Members() {
		if mem.Key == "handle_context" {
			f.HandleContext, _ = mem.Value.Str()
			continue
		}
		if name, ok := refName(mem.Value); ok {
			refs[name] = true
			v := in.vars[name].(*msgVar)
			if byID != nil && byID(mem.Key, v) {
				continue
			}
			*slots[mem.Key] = in.current(v)
			continue
		}
		if nv, ok := mem.Value.Get("$new"); ok {
			m, err := envelope.New(kindByName[str(nv, "class")], in.resolveJSON(mustGet(nv, "kwargs")))
			if err != nil {
				in.t.Fatalf("test harness: $new: %v", err)
			}
			*slots[mem.Key] = m
			continue
		}
		dst, ok := values[mem.Key]
		if !ok {
			in.t.Fatalf("test harness: unknown factory argument %s", mem.Key)
		}
		*dst = in.resolveJSON(mem.Value)
	}
	return f, refs
}

func mustGet(v jsonv.Value, key string) jsonv.Value {
	x, _ := v.Get(key)
	return x
}

// hook builds an observer from a $hook spec: record [name, instruction];
// raise; append another hook; add a message when the instruction matches.
func (in *interp) hook(spec jsonv.Value) store.Observer {
	return func(ctx context.Context, branch uuid.UUID, m *envelope.Message) error {
		text := jsonv.NullValue()
		if ic, ok := m.Content.(*envelope.InstructionContent); ok {
			text = ic.Instruction
		}
		if name := str(spec, "record"); name != "" {
			in.fired = append(in.fired, jsonv.ArrayValue(jsonv.StringValue(name), text))
		}
		if ap, ok := spec.Get("append_hook"); ok {
			hv := in.vars[str(ap, "on")].(*hooksVar)
			if _, err := in.st.Observe(hv.branch, in.hook(mustGet(ap, "hook"))); err != nil {
				return err
			}
		}
		if trig, ok := spec.Get("if_instruction"); ok && jsonv.Equal(trig, text) {
			then := mustGet(spec, "then_add")
			mg := in.vars[str(then, "on")].(*manager)
			if _, err := in.addMessage(mg.id, mustGet(then, "kwargs")); err != nil {
				return err
			}
		}
		if r, ok := spec.Get("raise"); ok {
			typ, _ := r.Elems()[0].Str()
			msg, _ := r.Elems()[1].Str()
			return fmt.Errorf("%s: %s", typ, msg)
		}
		return nil
	}
}

func (in *interp) progressionCall(p *store.Progression, call string, args jsonv.Value) (jsonv.Value, error) {
	a := args.Elems()
	ids := func(v jsonv.Value) []uuid.UUID {
		if v.Kind() == jsonv.Array {
			var out []uuid.UUID
			for _, e := range v.Elems() {
				out = append(out, in.uuidArg(e))
			}
			return out
		}
		return []uuid.UUID{in.uuidArg(v)}
	}
	idResult := func(id uuid.UUID, err error) (jsonv.Value, error) {
		if err != nil {
			return jsonv.Value{}, err
		}
		return jsonv.StringValue(id.String()), nil
	}
	switch call {
	case "include":
		return jsonv.BoolValue(p.Include(ids(a[0])...)), nil
	case "append":
		p.Append(ids(a[0])...)
		return jsonv.NullValue(), nil
	case "exclude":
		return jsonv.BoolValue(p.Exclude(ids(a[0])...)), nil
	case "insert":
		i, _ := a[0].Int64()
		p.Insert(int(i), ids(a[1])...)
		return jsonv.NullValue(), nil
	case "index":
		i, err := p.Index(in.uuidArg(a[0]))
		return jsonv.IntValue(int64(i)), err
	case "pop":
		i := int64(-1)
		if len(a) > 0 {
			i, _ = a[0].Int64()
		}
		return idResult(p.Pop(int(i)))
	case "popleft":
		return idResult(p.PopLeft())
	case "__getitem__":
		i, _ := a[0].Int64()
		return idResult(p.Get(int(i)))
	case "__bool__":
		return jsonv.BoolValue(p.Len() > 0), nil
	case "__contains__":
		var want []uuid.UUID
		for _, v := range []jsonv.Value{a[0]} {
			if v.Kind() == jsonv.String { // a plain string is not an id: never contained
				return jsonv.BoolValue(false), nil
			}
			want = ids(v)
		}
		return jsonv.BoolValue(p.Contains(want...)), nil
	case "remove":
		return jsonv.NullValue(), p.Remove(ids(a[0])...)
	}
	return jsonv.Value{}, fmt.Errorf("test harness: Progression.%s", call)
}

// read answers a `read` path: var.attr.path.
func (in *interp) read(path string) jsonv.Value {
	parts := strings.Split(path, ".")
	v, ok := in.vars[parts[0]]
	if !ok {
		return jsonv.ObjectValue(jsonv.Member{Key: "error", Value: jsonv.StringValue("KeyError")})
	}
	rest := strings.Join(parts[1:], ".")
	switch x := v.(type) {
	case *manager:
		switch rest {
		case "progression", "messages":
			return in.order(x.id)
		case "system":
			b, _ := in.st.GetBranch(in.ctx, x.id)
			if b.SystemID == nil {
				return jsonv.NullValue()
			}
			sm, _ := in.st.GetMessage(in.ctx, x.id, *b.SystemID)
			return summary(sm.Message)
		case "system.sender", "system.recipient":
			b, _ := in.st.GetBranch(in.ctx, x.id)
			sm, _ := in.st.GetMessage(in.ctx, x.id, *b.SystemID)
			if rest == "system.sender" {
				return sm.Message.Sender.JSON()
			}
			return sm.Message.Recipient.JSON()
		}
	case *msgVar:
		return messagePath(in.current(x), rest)
	case *store.Progression:
		switch rest {
		case "":
			return idList(x.Order)
		case "to_dict":
			return x.Encode(envelope.ModePython, "")
		}
	}
	return jsonv.ObjectValue(jsonv.Member{Key: "error", Value: jsonv.StringValue("test harness: unknown path " + path)})
}

func messagePath(m *envelope.Message, path string) jsonv.Value {
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
	case "is_responded", "content.is_responded":
		rc, ok := m.Content.(*envelope.ActionRequestContent)
		return jsonv.BoolValue(ok && rc.IsResponded())
	}
	if strings.HasPrefix(path, "content.") {
		v, _ := m.Content.Dict().Get(strings.TrimPrefix(path, "content."))
		return v
	}
	return jsonv.ObjectValue(jsonv.Member{Key: "error", Value: jsonv.StringValue("test harness: unknown path " + path)})
}

// current returns the message a name stands for now: the branch's version
// when a branch holds it.
func (in *interp) current(v *msgVar) *envelope.Message {
	if v.branch != nil {
		if sm, err := in.st.GetMessage(in.ctx, *v.branch, v.msg.ID); err == nil {
			v.msg = sm.Message
		}
	}
	return v.msg
}

func (in *interp) bind(name string, v any) {
	if name != "" {
		in.vars[name] = v
	}
}

func refName(v jsonv.Value) (string, bool) {
	r, ok := v.Get("$ref")
	if !ok {
		return "", false
	}
	s, _ := r.Str()
	return s, true
}

// messageArg resolves a $ref or $new message argument (nil for anything
// else).
func (in *interp) messageArg(v jsonv.Value) *envelope.Message {
	if name, ok := refName(v); ok {
		if mv, ok := in.vars[name].(*msgVar); ok {
			return in.current(mv)
		}
		return nil
	}
	if nv, ok := v.Get("$new"); ok {
		m, err := envelope.New(kindByName[str(nv, "class")], in.resolveJSON(mustGet(nv, "kwargs")))
		if err != nil {
			in.t.Fatalf("test harness: $new: %v", err)
		}
		return m
	}
	return nil
}

// resolveJSON replaces argument markers inside a JSON value: $uuid and $id
// become id text, $ref and $new messages their json-mode dicts.
func (in *interp) resolveJSON(v jsonv.Value) jsonv.Value {
	switch v.Kind() {
	case jsonv.Array:
		out := make([]jsonv.Value, v.Len())
		for i, e := range v.Elems() {
			out[i] = in.resolveJSON(e)
		}
		return jsonv.ArrayValue(out...)
	case jsonv.Object:
		if id, ok := in.idArg(v); ok {
			return jsonv.StringValue(id.String())
		}
		if m := in.messageArg(v); m != nil {
			enc, _ := m.Encode(envelope.ModeJSON, "")
			return enc
		}
		out := make([]jsonv.Member, 0, v.Len())
		for _, m := range v.Members() {
			out = append(out, jsonv.Member{Key: m.Key, Value: in.resolveJSON(m.Value)})
		}
		return jsonv.ObjectValue(out...)
	}
	return v
}

// idArg reads {"$uuid": s} or {"$id": var}.
func (in *interp) idArg(v jsonv.Value) (uuid.UUID, bool) {
	if u, ok := v.Get("$uuid"); ok {
		s, _ := u.Str()
		return envelope.ParseID(s)
	}
	if n, ok := v.Get("$id"); ok {
		s, _ := n.Str()
		if mv, ok := in.vars[s].(*msgVar); ok {
			return mv.msg.ID, true
		}
	}
	return uuid.UUID{}, false
}

func (in *interp) uuidArg(v jsonv.Value) uuid.UUID {
	id, ok := in.idArg(v)
	if !ok {
		in.t.Fatalf("test harness: %s is not an id argument", v)
	}
	return id
}

func (in *interp) order(branch uuid.UUID) jsonv.Value {
	page, err := in.st.ListMessages(in.ctx, branch, store.ListInput{PageSize: store.MaxPageSize})
	if err != nil {
		return jsonv.ObjectValue(jsonv.Member{Key: "error", Value: jsonv.StringValue(err.Error())})
	}
	ids := make([]uuid.UUID, len(page.Messages))
	for i, sm := range page.Messages {
		ids[i] = sm.Message.ID
	}
	return idList(ids)
}

func (in *interp) progressionResult(branch uuid.UUID) (jsonv.Value, error) {
	return jsonv.ObjectValue(jsonv.Member{Key: "progression", Value: in.order(branch)}), nil
}

func branchResult(id uuid.UUID) jsonv.Value {
	return jsonv.ObjectValue(
		jsonv.Member{Key: "id", Value: jsonv.StringValue(id.String())},
		jsonv.Member{Key: "class", Value: jsonv.StringValue("Branch")})
}

func idList(ids []uuid.UUID) jsonv.Value {
	out := make([]jsonv.Value, len(ids))
	for i, id := range ids {
		out[i] = jsonv.StringValue(id.String())
	}
	return jsonv.ArrayValue(out...)
}

// summary is the vectors' step result for a message.
func summary(m *envelope.Message) jsonv.Value {
	ch := jsonv.NullValue()
	if m.Channel != nil {
		ch = jsonv.StringValue(*m.Channel)
	}
	return jsonv.ObjectValue(
		jsonv.Member{Key: "id", Value: jsonv.StringValue(m.ID.String())},
		jsonv.Member{Key: "class", Value: jsonv.StringValue(m.Kind().String())},
		jsonv.Member{Key: "sender", Value: m.Sender.JSON()},
		jsonv.Member{Key: "recipient", Value: m.Recipient.JSON()},
		jsonv.Member{Key: "channel", Value: ch},
		jsonv.Member{Key: "content", Value: m.Content.Dict()})
}
