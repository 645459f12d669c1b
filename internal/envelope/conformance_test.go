package envelope_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
	"github.com/historyd/historyd/internal/vectors"
)

// envelopeOps are the vector operations this package answers for; the
// scenario records of the other groups belong to store and exchange.
var envelopeOps = map[string]bool{
	"meta": true, "construct": true, "encode": true, "decode": true, "render": true,
	"clone": true, "participant": true, "validate_participant": true, "minimal_yaml": true,
	"parse_assistant_response": true, "created_at": true, "metadata": true, "id": true,
	"embedding": true, "validate_order": true, "content_method": true,
}

func belongsToEnvelope(r vectors.Record) bool {
	return envelopeOps[r.Op] || (r.Op == "scenario" && r.Group == "update")
}

// TestConformance replays every vector record of the envelope's operations
// (ADR-0001 D1-D4, ADR-0006 D1, D2, D6) and prints the tally line the
// envelope issue asks for. A "differs" record passes when historyd produces
// its historyd_output; python-only records are counted, not replayed.
func TestConformance(t *testing.T) {
	recs := vectors.ForTest(t)
	var tally vectors.Tally
	for _, r := range recs {
		if !belongsToEnvelope(r) {
			continue
		}
		if r.IsPythonOnly() {
			tally.PythonOnly++
			continue
		}
		name := fmt.Sprintf("L%03d_%s_%s", r.Line, r.Group, r.Name)
		t.Run(name, func(t *testing.T) {
			diff := ""
			kept, deliberate := keptByHistoryd[r.Name]
			if deliberate {
				diff = replayKeeping(r, kept.field, kept.value)
			} else {
				diff = replay(r)
			}
			if diff != "" {
				tally.Failed++
				t.Errorf("%s\n  input: %s\n  %s", r.Name, r.Input, diff)
				return
			}
			if r.Expect == "differs" || deliberate {
				tally.Differ++
			} else {
				tally.Matched++
			}
		})
	}
	t.Log(tally.String())
	fmt.Println(tally.String())
	if tally.Matched+tally.Differ == 0 {
		t.Fatal("no envelope record was replayed")
	}
}

// keptByHistoryd lists the records whose recorded output shows LionAGI
// 0.27 dropping a field the design records keep, and that field. Two are
// marked "match" in the file although their "differs" twins (the
// encode(decode(...)) records) say historyd keeps the field: a dict
// response_format (ADR-0006 D2: "A dictionary response format is retained
// because it is serializable") and ActionResponse.error (docs/design.md#differs). One is
// a "differs" record without a historyd_output. For each, historyd must
// produce the recorded output except that the field is kept, with the value
// the input gave it (issue 13 item 12: compared by value, not just
// non-null; a garbled ActionResponse error text must fail).
var keptByHistoryd = map[string]struct{ field, value string }{
	"Instruction(full dict content)":                {"response_format", `{"summary": "str"}`},
	"ActionResponse(content with error='boom')":     {"error", `"boom"`},
	"ActionResponse.update(output=...) drops error": {"error", `"e"`},
}

// replayKeeping replays a keptByHistoryd record: the recorded output must
// match once the kept field is set aside, and every value set aside must be
// the kept one.
func replayKeeping(r vectors.Record, field, value string) string {
	saved, savedValue := keepField, keepValue
	want, err := jsonv.ParseString(value)
	if err != nil {
		return "bad keptByHistoryd value: " + err.Error()
	}
	keepField, keepValue = field, want
	defer func() { keepField, keepValue = saved, savedValue }()
	keptSeen, keptWrong = 0, ""
	if d := replay(r); d != "" {
		return d
	}
	if keptWrong != "" {
		return keptWrong
	}
	if keptSeen == 0 {
		return fmt.Sprintf("historyd must keep %q here, and it did not", field)
	}
	return ""
}

// keepField, when set, is removed from the actual output before matching
// (counting keptSeen, and noting in keptWrong a value other than keepValue),
// so a record can be checked for everything else.
var (
	keepField string
	keepValue jsonv.Value
	keptSeen  int
	keptWrong string
)

// setAsideKept removes keepField from every object in v; on the actual side
// (count) it checks each removed value against keepValue.
func setAsideKept(v jsonv.Value, count bool) jsonv.Value {
	if keepField == "" {
		return v
	}
	switch v.Kind() {
	case jsonv.Object:
		var ms []jsonv.Member
		for _, m := range v.Members() {
			if m.Key == keepField || strings.HasSuffix(m.Key, "."+keepField) {
				if count {
					keptSeen++
					if !jsonv.Equal(m.Value, keepValue) && keptWrong == "" {
						keptWrong = fmt.Sprintf("kept %s: want %s, got %s", m.Key, keepValue, m.Value)
					}
				}
				continue
			}
			ms = append(ms, jsonv.Member{Key: m.Key, Value: setAsideKept(m.Value, count)})
		}
		return jsonv.ObjectValue(ms...)
	case jsonv.Array:
		out := make([]jsonv.Value, v.Len())
		for i, e := range v.Elems() {
			out[i] = setAsideKept(e, count)
		}
		return jsonv.ArrayValue(out...)
	}
	return v
}

// replay runs one record and returns "" on a match.
func replay(r vectors.Record) string {
	in := r.Input
	switch r.Op {
	case "meta":
		return replayMeta(r)
	case "minimal_yaml":
		v, _ := in.Get("value")
		out := pyfmt.MinimalYAML(v)
		if d, ok := in.Get("drop_empties"); ok {
			if b, _ := d.Bool(); !b {
				out = pyfmt.MinimalYAMLKeepEmpties(v)
			}
		}
		return compare(r, jsonv.StringValue(out), nil)
	case "parse_assistant_response":
		resp, _ := in.Get("response")
		text, raw, err := envelope.ParseAssistantResponse(resp)
		return compare(r, jsonv.ArrayValue(jsonv.StringValue(text), raw), err)
	case "created_at":
		v, _ := in.Get("value")
		f, err := envelope.ParseCreatedAt(v)
		return compare(r, jsonv.FloatValue(f), err)
	case "metadata":
		v, _ := in.Get("value")
		md, err := envelope.NormalizeMetadata(v)
		return compare(r, md, err)
	case "id":
		v, _ := in.Get("value")
		s, isStr := v.Str()
		id, ok := envelope.ParseID(s)
		if !isStr || !ok {
			return compare(r, jsonv.Value{}, fmt.Errorf("%w: invalid UUID", envelope.ErrInvalid)) // ParseID said no: an input error
		}
		return compare(r, jsonv.StringValue(id.String()), nil)
	case "embedding":
		v, _ := in.Get("value")
		emb, present, err := envelope.ParseEmbedding(v)
		out := jsonv.NullValue()
		if present {
			vals := make([]jsonv.Value, len(emb))
			for i, f := range emb {
				vals[i] = jsonv.FloatValue(f)
			}
			out = jsonv.ArrayValue(vals...)
		}
		return compare(r, out, err)
	case "validate_order":
		v, _ := in.Get("value")
		ids, err := envelope.ValidateOrder(v)
		vals := make([]jsonv.Value, len(ids))
		for i, id := range ids {
			vals[i] = jsonv.StringValue(id.String())
		}
		return compare(r, jsonv.ArrayValue(vals...), err)
	case "validate_participant":
		v, _ := in.Get("value")
		p, err := envelope.NormalizeParticipant(v)
		return compare(r, inMemory(p), err)
	case "participant":
		return replayParticipant(r)
	case "content_method":
		return replayContentMethod(r)
	case "construct":
		return replayConstruct(r)
	case "encode":
		return replayEncode(r)
	case "decode":
		return replayDecode(r)
	case "render":
		m, err := envelope.Decode(in)
		if err != nil {
			return compare(r, jsonv.Value{}, err)
		}
		return compareMessage(r, m, nil)
	case "clone":
		return replayClone(r)
	case "scenario":
		return replayScenario(r)
	}
	return "no replay for op " + r.Op
}

// compare checks a plain result: an error where the record wants one (a
// recorded error, or a historyd_output that is {"error": ...}), else the
// output through the placeholder-aware matcher.
func compare(r vectors.Record, got jsonv.Value, err error) string {
	if wantsError(r) {
		if err == nil {
			return fmt.Sprintf("want an error like %s, got %s", errorWanted(r), got)
		}
		if r.HasError && !(r.Expect == "differs" && r.HasHD) {
			if d := vectors.MatchError(r.Error, errorJSON(err)); d != "" {
				return d
			}
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("unexpected error: %v", err)
	}
	return vectors.NewMatcher().Match(setAsideKept(r.Want(), false), setAsideKept(got, true))
}

// errorJSON writes an error as vectors.MatchError reads it (issue 13 item
// 8): an input error is INVALID_ARGUMENT, as internal/server maps
// envelope.ErrInvalid; anything else is INTERNAL, which no record matches.
func errorJSON(err error) jsonv.Value {
	kind := "INTERNAL"
	if errors.Is(err, envelope.ErrInvalid) {
		kind = vectors.KindInvalid
	}
	return obj("type", jsonv.StringValue(kind), "message", jsonv.StringValue(err.Error()))
}

func wantsError(r vectors.Record) bool {
	if r.Expect == "differs" && r.HasHD {
		return r.Historyd.Kind() == jsonv.Object && r.Historyd.Has("error") && r.Historyd.Len() == 1
	}
	return r.HasError
}

func errorWanted(r vectors.Record) string {
	if r.HasError {
		return r.Error.String()
	}
	return r.Historyd.String()
}

// inMemory writes a participant the way the vectors record LionAGI's
// in-memory value: {"$py": "MessageRole", "value"}, {"$py": "UUID",
// "repr"}, a plain string, or null.
func inMemory(p envelope.Participant) jsonv.Value {
	switch p.Kind() {
	case envelope.ParticipantNone:
		return jsonv.NullValue()
	case envelope.ParticipantRole:
		role, _ := p.Role()
		return obj("$py", jsonv.StringValue("MessageRole"), "value", jsonv.StringValue(string(role)))
	case envelope.ParticipantID:
		return obj("$py", jsonv.StringValue("UUID"), "repr", jsonv.StringValue(p.String()))
	}
	return jsonv.StringValue(p.String())
}

// obj builds a JSON object from alternating keys and values.
var obj = vectors.Obj

func str(v jsonv.Value, key string) string {
	x, _ := v.Get(key)
	s, _ := x.Str()
	return s
}

func replayMeta(r vectors.Record) string {
	switch q := str(r.Input, "query"); q {
	case "versions":
		// The version record pins which LionAGI historyd reproduces; the
		// Python-side versions (interpreter, pydantic) have no Go analogue.
		got := obj("lionagi", jsonv.StringValue(envelope.LionAGIVersion), "commit", jsonv.StringValue(envelope.LionAGICommit))
		want := obj("lionagi", mustGet(r.Output, "lionagi"), "commit", mustGet(r.Output, "commit"))
		return vectors.NewMatcher().Match(want, got)
	case "MessageRole":
		var ms []jsonv.Member
		for _, role := range []envelope.Role{envelope.RoleSystem, envelope.RoleUser, envelope.RoleAssistant, envelope.RoleUnset, envelope.RoleAction} {
			ms = append(ms, jsonv.Member{Key: strings.ToUpper(string(role)), Value: jsonv.StringValue(string(role))})
		}
		return vectors.NewMatcher().Match(r.Output, jsonv.ObjectValue(ms...))
	case "class_names":
		ms := []jsonv.Member{
			{Key: "Element", Value: jsonv.StringValue(envelope.ClassElement)},
			{Key: "Node", Value: jsonv.StringValue(envelope.ClassNode)},
		}
		for k := envelope.KindGeneric; k <= envelope.KindActionResponse; k++ {
			ms = append(ms, jsonv.Member{Key: k.String(), Value: jsonv.StringValue(k.ClassName())})
		}
		ms = append(ms,
			jsonv.Member{Key: "Pile", Value: jsonv.StringValue(envelope.ClassPile)},
			jsonv.Member{Key: "Progression", Value: jsonv.StringValue(envelope.ClassProgression)},
			jsonv.Member{Key: "Flow", Value: jsonv.StringValue(envelope.ClassFlow)},
			jsonv.Member{Key: "Exchange", Value: jsonv.StringValue(envelope.ClassExchange)},
		)
		return vectors.NewMatcher().Match(r.Output, jsonv.ObjectValue(ms...))
	default:
		return "unknown meta query " + q
	}
}

func mustGet(v jsonv.Value, key string) jsonv.Value {
	x, _ := v.Get(key)
	return x
}
