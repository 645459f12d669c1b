package store_test

import (
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/vectors"
)

// The values of the scenario interpreter (conformance_steps_test.go): reads
// of bound names, argument markers, and the step results it writes.

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
			return vectors.Summary(sm.Message)
		case "system.sender", "system.recipient":
			b, _ := in.st.GetBranch(in.ctx, x.id)
			sm, _ := in.st.GetMessage(in.ctx, x.id, *b.SystemID)
			if rest == "system.sender" {
				return sm.Message.Sender.JSON()
			}
			return sm.Message.Recipient.JSON()
		}
	case *msgVar:
		return vectors.MessagePath(in.current(x), rest)
	case *store.Progression:
		switch rest {
		case "":
			return vectors.IDs(x.Order)
		case "to_dict":
			return x.Encode(envelope.ModePython, "")
		}
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
	return vectors.IDs(ids)
}

func (in *interp) progressionResult(branch uuid.UUID) (jsonv.Value, error) {
	return jsonv.ObjectValue(jsonv.Member{Key: "progression", Value: in.order(branch)}), nil
}

func branchResult(id uuid.UUID) jsonv.Value {
	return jsonv.ObjectValue(
		jsonv.Member{Key: "id", Value: jsonv.StringValue(id.String())},
		jsonv.Member{Key: "class", Value: jsonv.StringValue("Branch")})
}
