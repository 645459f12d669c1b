package envelope_test

import (
	"fmt"
	"strings"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

var kindByName = map[string]envelope.Kind{
	"Message": envelope.KindGeneric, "System": envelope.KindSystem, "Instruction": envelope.KindInstruction,
	"AssistantResponse": envelope.KindAssistantResponse, "ActionRequest": envelope.KindActionRequest,
	"ActionResponse": envelope.KindActionResponse,
}

var kindByContentClass = map[string]envelope.Kind{
	"SystemContent": envelope.KindSystem, "InstructionContent": envelope.KindInstruction,
	"AssistantResponseContent": envelope.KindAssistantResponse, "ActionRequestContent": envelope.KindActionRequest,
	"ActionResponseContent": envelope.KindActionResponse,
}

// constructSpec runs a {"class", "kwargs"} construct spec for messages.
func constructSpec(spec jsonv.Value) (*envelope.Message, error) {
	cls := str(spec, "class")
	kwargs, _ := spec.Get("kwargs")
	if cls == "AssistantResponse.from_response" {
		resp, _ := kwargs.Get("response")
		var sender, recipient *envelope.Participant
		if v, ok := kwargs.Get("sender"); ok {
			p, err := envelope.NormalizeParticipant(v)
			if err != nil {
				return nil, err
			}
			if !v.IsNull() {
				sender = &p
			}
		}
		if v, ok := kwargs.Get("recipient"); ok && !v.IsNull() {
			p, err := envelope.NormalizeParticipant(v)
			if err != nil {
				return nil, err
			}
			recipient = &p
		}
		return envelope.FromResponse(resp, sender, recipient)
	}
	k, ok := kindByName[cls]
	if !ok {
		return nil, fmt.Errorf("test harness: unknown class %q", cls)
	}
	return envelope.New(k, kwargs)
}

func replayConstruct(r vectors.Record) string {
	cls := str(r.Input, "class")
	kwargs, _ := r.Input.Get("kwargs")
	switch {
	case strings.HasSuffix(cls, ".from_dict"):
		k := kindByContentClass[strings.TrimSuffix(cls, ".from_dict")]
		data, _ := kwargs.Get("data")
		c, err := envelope.ContentFromDict(k, data)
		if err != nil {
			return compare(r, jsonv.Value{}, err)
		}
		got := []jsonv.Member{{Key: "class", Value: jsonv.StringValue(strings.TrimSuffix(cls, ".from_dict"))}}
		if r.Want().Has("to_dict") {
			got = append(got, jsonv.Member{Key: "to_dict", Value: c.Dict()})
		}
		rendered, rerr := c.Render()
		if rerr != nil {
			return compare(r, jsonv.Value{}, rerr)
		}
		got = append(got, jsonv.Member{Key: "rendered", Value: rendered.JSON()})
		return compare(r, jsonv.ObjectValue(got...), nil)
	case cls == "Element":
		e, err := envelope.NewElement(kwargs)
		if err != nil {
			return compare(r, jsonv.Value{}, err)
		}
		return compareModes(r, "Element", func(m envelope.Mode) (jsonv.Value, error) { return e.Encode(m, "") })
	case cls == "Node":
		n, err := envelope.NewNode(kwargs)
		if err != nil {
			return compare(r, jsonv.Value{}, err)
		}
		return compareModes(r, "Node", func(m envelope.Mode) (jsonv.Value, error) { return n.Encode(m, "") })
	}
	m, err := constructSpec(r.Input)
	return compareMessage(r, m, err)
}

// compareModes checks an Element/Node record: {class, json} or the modes
// listed in the input.
func compareModes(r vectors.Record, class string, enc func(envelope.Mode) (jsonv.Value, error)) string {
	want := r.Want()
	var got []jsonv.Member
	for _, mem := range want.Members() {
		var v jsonv.Value
		var err error
		switch mem.Key {
		case "class":
			v = jsonv.StringValue(class)
		case "json":
			v, err = enc(envelope.ModeJSON)
		case "python":
			v, err = enc(envelope.ModePython)
		case "db":
			v, err = enc(envelope.ModeDB)
		default:
			return "test harness: unknown output key " + mem.Key
		}
		if err != nil {
			return fmt.Sprintf("unexpected error: %v", err)
		}
		got = append(got, jsonv.Member{Key: mem.Key, Value: v})
	}
	return compare(r, jsonv.ObjectValue(got...), nil)
}

func replayEncode(r vectors.Record) string {
	in := r.Input
	mode := ""
	if msg, ok := in.Get("message"); ok && in.Has("mode") {
		in, mode = msg, str(r.Input, "mode")
	}
	m, err := envelope.Decode(in)
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	if mode != "" {
		md, err := envelope.ParseMode(mode)
		if err != nil {
			return compare(r, jsonv.Value{}, err)
		}
		v, err := m.Encode(md, "")
		return compare(r, v, err)
	}
	return compareMessage(r, m, nil)
}

func replayDecode(r vectors.Record) string {
	var m *envelope.Message
	var err error
	switch {
	case r.Input.Has("json_text"):
		m, err = envelope.DecodeJSON([]byte(str(r.Input, "json_text")))
	case r.Input.Has("as_class"):
		d, _ := r.Input.Get("dict")
		m, err = envelope.DecodeWith(d, envelope.DecodeOptions{As: kindByName[str(r.Input, "as_class")]})
	default:
		m, err = envelope.Decode(r.Input)
	}
	return compareMessage(r, m, err)
}

func replayClone(r vectors.Record) string {
	var src *envelope.Message
	var err error
	if spec, ok := r.Input.Get("$construct"); ok {
		src, err = constructSpec(spec)
	} else {
		src, err = envelope.Decode(r.Input)
	}
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	c, err := src.Clone()
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	js, _ := c.Encode(envelope.ModeJSON, "")
	want := r.Want()
	var got []jsonv.Member
	for _, mem := range want.Members() {
		var v jsonv.Value
		switch mem.Key {
		case "clone":
			v = js
		case "same_class":
			v = jsonv.BoolValue(c.Kind() == src.Kind())
		case "new_id":
			v = jsonv.BoolValue(c.ID != src.ID)
		case "clone.recipient":
			v = c.Recipient.JSON()
		case "clone.is_broadcast":
			v = jsonv.BoolValue(c.IsBroadcast())
		default:
			return "test harness: unknown clone output " + mem.Key
		}
		got = append(got, jsonv.Member{Key: mem.Key, Value: v})
	}
	return compare(r, jsonv.ObjectValue(got...), nil)
}

func replayParticipant(r vectors.Record) string {
	fields := jsonv.ObjectValue()
	if v, ok := r.Input.Get("value"); ok {
		fields = obj("sender", v, "recipient", v)
	}
	m, err := envelope.New(envelope.KindGeneric, fields)
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	js, _ := m.Encode(envelope.ModeJSON, "")
	back, err := envelope.Decode(js)
	if err != nil {
		return fmt.Sprintf("round trip failed: %v", err)
	}
	got := obj(
		"in_memory", inMemory(m.Recipient),
		"json", mustGet(js, "recipient"),
		"sender_json", mustGet(js, "sender"),
		"is_broadcast", jsonv.BoolValue(m.IsBroadcast()),
		"is_direct", jsonv.BoolValue(m.IsDirect()),
		"after_json_round_trip", back.Recipient.JSON(),
		"round_trip_is_broadcast", jsonv.BoolValue(back.IsBroadcast()),
	)
	return compare(r, got, nil)
}

func replayContentMethod(r vectors.Record) string {
	k := kindByContentClass[str(r.Input, "class")]
	kwargs, _ := r.Input.Get("kwargs")
	c, err := envelope.ContentFromDict(k, kwargs)
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	var got jsonv.Value
	switch name := str(r.Input, "method") + str(r.Input, "attribute"); name {
	case "render_compact":
		got = jsonv.StringValue(c.(*envelope.ActionRequestContent).RenderCompact())
	case "render_summary":
		got = jsonv.StringValue(c.(*envelope.ActionResponseContent).RenderSummary())
	case "success":
		got = jsonv.BoolValue(c.(*envelope.ActionResponseContent).Success())
	case "request_id":
		if id := c.(*envelope.ActionResponseContent).ActionRequestID; id != nil {
			got = jsonv.StringValue(*id)
		}
	case "result":
		got = c.(*envelope.ActionResponseContent).Output
	default:
		return "test harness: unknown content method " + name
	}
	return compare(r, got, nil)
}

// compareMessage checks the message outputs a record lists (class, the
// three modes, db with a custom key, chat_msg, rendered, image_content,
// role and the routing predicates). A recorded error passes when either
// building or rendering the message fails.
func compareMessage(r vectors.Record, m *envelope.Message, err error) string {
	if err != nil {
		return compare(r, jsonv.Value{}, err)
	}
	rendered, rerr := m.Render()
	if wantsError(r) {
		if rerr != nil {
			return ""
		}
		return fmt.Sprintf("want an error like %s, got a message that renders as %s", errorWanted(r), rendered.JSON())
	}
	want := r.Want()
	var got []jsonv.Member
	for _, mem := range want.Members() {
		var v jsonv.Value
		var eerr error
		switch mem.Key {
		case "class":
			v = jsonv.StringValue(m.Kind().String())
		case "python":
			v, eerr = m.Encode(envelope.ModePython, "")
		case "json":
			v, eerr = m.Encode(envelope.ModeJSON, "")
		case "db":
			v, eerr = m.Encode(envelope.ModeDB, "")
		case "db_custom_key":
			key := str(mem.Value, "key")
			var d jsonv.Value
			d, eerr = m.Encode(envelope.ModeDB, key)
			v = obj("key", jsonv.StringValue(key), "dict", d)
		case "chat_msg":
			if cm, cerr := m.ChatMsg(); cerr == nil {
				v = cm.JSON()
			}
		case "rendered":
			if rerr == nil {
				v = rendered.JSON()
			}
		case "image_content":
			if rerr == nil && rendered.IsParts() {
				var imgs []jsonv.Value
				for _, p := range rendered.JSON().Elems() {
					if t, _ := p.Get("type"); t.String() == `"image_url"` {
						imgs = append(imgs, p)
					}
				}
				v = jsonv.ArrayValue(imgs...)
			}
		case "role":
			v = jsonv.StringValue(string(m.Role()))
		case "is_broadcast":
			v = jsonv.BoolValue(m.IsBroadcast())
		case "is_direct":
			v = jsonv.BoolValue(m.IsDirect())
		default:
			return "test harness: unknown message output " + mem.Key
		}
		if eerr != nil {
			return fmt.Sprintf("unexpected error: %v", eerr)
		}
		got = append(got, jsonv.Member{Key: mem.Key, Value: v})
	}
	if rerr != nil && (want.Has("rendered") || want.Has("chat_msg")) {
		if rv, _ := want.Get("rendered"); !rv.IsNull() {
			return fmt.Sprintf("unexpected render error: %v", rerr)
		}
	}
	return vectors.NewMatcher().Match(setAsideKept(want, false), setAsideKept(jsonv.ObjectValue(got...), true))
}
