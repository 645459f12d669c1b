package store_test

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/vectors"
)

// The calls of the scenario interpreter (conformance_steps_test.go): a
// MessageManager or Branch method, add_message's arguments, hooks, and the
// Progression list operations.

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
		return vectors.Summary(res.Message.Message), nil
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
					// The typed Go API cannot carry a value that is not an id: a
					// fresh UUID stands for it, a member of no branch, and
					// ToChatMessages itself must refuse it.
					id = uuid.New()
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
