package exchange

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

// deliberateDifferences are the exchange records, or steps of them, that historyd does not replay
// through the Go API, each with its reason. Steps are indexed from 0. They are logged, never
// skipped silently.
var deliberateDifferences = map[string]map[int]string{
	"unknown recipients, self-send, errors": {17: "send(sender=\"aaaaaaaa-...\" as a str): LionAGI looks the " +
		"string up in its UUID index and fails; the Go API types the sender uuid.UUID, and over gRPC the " +
		"sender's UUID text is normalised as ADR-0006 D1 normalises participants, so the send succeeds"},
}

// notScored are the records this suite does not count as matched or differing (issue 13 items 10
// and 11), each with its reason; they are counted and logged.
var notScored = map[string]string{
	"string owner ids": "not expressible: the Go API types owners uuid.UUID, so a plain-string owner cannot " +
		"be passed; the gRPC replay (server TestExchangeVectorsOverGRPC) replays this record and checks " +
		"historyd's INVALID_ARGUMENT and dead letter",
	"Flow basics": "not applicable: a free-standing Flow with add_progression/get_progression and their error " +
		"texts exists only in export_test.go (test-only code); production flows are reached through " +
		"Register/Send/Collect, which the other records replay",
}

// TestExchangeVectors replays the exchange and flow scenario records through the Go API
// (ADR-0006 D5; vectors groups "exchange" and "flow").
func TestExchangeVectors(t *testing.T) {
	var tally vectors.Tally
	unscored := 0
	for _, r := range vectors.ForTest(t) {
		if r.Group != "exchange" && r.Group != "flow" {
			continue
		}
		t.Run(r.Name, func(t *testing.T) {
			logPythonOnly(t, r)
			if why, ok := notScored[r.Name]; ok {
				t.Logf("not scored: %s", why)
				unscored++
				return
			}
			skips := deliberateDifferences[r.Name]
			if why, ok := skips[-1]; ok {
				t.Logf("deliberate difference, not replayed: %s", why)
				tally.Differ++
				return
			}
			if d := replayExchange(r, skips, t.Logf); d != "" {
				tally.Failed++
				t.Errorf("line %d: %s", r.Line, d)
				return
			}
			if len(skips) > 0 {
				tally.Differ++
			} else {
				tally.Matched++
			}
		})
	}
	t.Logf("%s, %d not applicable or not expressible (listed)", tally, unscored)
	if tally.Matched == 0 {
		t.Error("no exchange record was replayed")
	}
}

// logPythonOnly lists the steps the recording left out because only Python can express them.
func logPythonOnly(t *testing.T, r vectors.Record) {
	for _, s := range r.PythonOnly.Elems() {
		str, _ := s.Str()
		t.Logf("python-only step, not recorded as JSON: %s", str)
	}
}

// replayExchange runs one scenario record and compares every step; it returns "" when all match.
func replayExchange(r vectors.Record, skips map[int]string, logf func(string, ...any)) string {
	steps, _ := r.Input.Get("steps")
	outputs := r.Want().Elems()
	if len(outputs) != steps.Len() {
		return fmt.Sprintf("record has %d steps and %d outputs", steps.Len(), len(outputs))
	}
	h := &harness{exchanges: map[string]*Exchange{}, flows: map[string]*namedFlow{}}
	m := vectors.NewMatcher()
	for i, step := range steps.Elems() {
		if why, ok := skips[i]; ok {
			logf("step %d not replayed (deliberate difference): %s", i, why)
			continue
		}
		res, err := h.run(step)
		if d := compareStep(m, outputs[i], res, err); d != "" {
			return fmt.Sprintf("step %d %s: %s", i, step, d)
		}
		if reads, ok := step.Get("read"); ok {
			wantRead, _ := outputs[i].Get("read")
			for _, p := range reads.Elems() {
				name, _ := p.Str()
				w, _ := wantRead.Get(name)
				if d := m.Match(w, h.read(name)); d != "" {
					return fmt.Sprintf("step %d read %s: %s", i, name, d)
				}
			}
		}
	}
	return ""
}

// compareStep matches one step's outcome: a recorded error must be an error whose text contains
// LionAGI's message; a recorded result must match the result.
func compareStep(m *vectors.Matcher, want jsonv.Value, got jsonv.Value, err error) string {
	if we, ok := want.Get("error"); ok {
		if err == nil {
			return fmt.Sprintf("want error %s, got result %s", we, got)
		}
		msg, _ := we.Get("message")
		text, _ := msg.Str()
		if !strings.Contains(err.Error(), text) {
			return fmt.Sprintf("want error %q, got %q", text, err)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("want result, got error %v", err)
	}
	res, _ := want.Get("result")
	return m.Match(res, got)
}

// harness holds the scenario's variables.
type harness struct {
	exchanges map[string]*Exchange
	flows     map[string]*namedFlow
}

// namedFlow is a Flow the scenario built itself, with the name LionAGI gives it.
type namedFlow struct {
	name string
	f    *flow
}

func (h *harness) run(step jsonv.Value) (jsonv.Value, error) {
	as := strField(step, "as")
	if cls, ok := step.Get("new"); ok {
		switch c, _ := cls.Str(); c {
		case "Exchange":
			// The Exchange's own Element identity means nothing in historyd; the harness mints one.
			h.exchanges[as] = New()
			return vectors.Obj("id", jsonv.StringValue(uuid.NewString()), "class", jsonv.StringValue("Exchange")), nil
		case "Flow":
			kw, _ := step.Get("kwargs")
			nf := &namedFlow{name: strField(kw, "name"), f: newFlow()}
			h.flows[as] = nf
			return flowJSON(nf.name, nf.f), nil
		}
		return jsonv.Value{}, fmt.Errorf("harness: cannot construct %s", cls)
	}
	on := strField(step, "on")
	if x, ok := h.exchanges[on]; ok {
		return runExchangeStep(x, step)
	}
	if nf, ok := h.flows[on]; ok {
		return runFlowStep(nf.f, step)
	}
	return jsonv.Value{}, fmt.Errorf("harness: unbound variable %q", on)
}

func (h *harness) read(name string) jsonv.Value {
	if nf, ok := h.flows[name]; ok {
		return flowJSON(nf.name, nf.f)
	}
	return vectors.Obj("error", jsonv.StringValue("harness: cannot read "+name))
}

func runExchangeStep(x *Exchange, step jsonv.Value) (jsonv.Value, error) {
	args, _ := step.Get("args")
	kwargs, _ := step.Get("kwargs")
	a := args.Elems()
	if attr := strField(step, "get"); attr != "" {
		if attr != "owner_ids" {
			return jsonv.Value{}, fmt.Errorf("harness: unknown attribute %s", attr)
		}
		var ids []jsonv.Value
		for _, id := range x.OwnerIDs() {
			ids = append(ids, jsonv.StringValue(id.String()))
		}
		return jsonv.ArrayValue(ids...), nil
	}
	switch call := strField(step, "call"); call {
	case "register":
		s, err := x.Register(mustUUID(a[0]))
		if err != nil {
			return jsonv.Value{}, err
		}
		return ownerFlowJSON(x, s.Owner), nil
	case "unregister":
		// The flow's progressions and items, read before it goes (the harness runs one step at a
		// time, so nothing changes it in between); Unregister must return the same messages.
		owner := mustUUID(a[0])
		before, held := ownerFlowJSON(x, owner), x.lookup(owner)
		s, ok := x.Unregister(owner)
		if !ok {
			return jsonv.NullValue(), nil
		}
		if held == nil || !sameMessages(s, before) {
			return jsonv.Value{}, fmt.Errorf("harness: Unregister returned %+v, the flow held %s", s, before)
		}
		return before, nil
	case "get":
		if _, ok := x.Get(mustUUID(a[0])); !ok {
			return jsonv.NullValue(), nil
		}
		return ownerFlowJSON(x, mustUUID(a[0])), nil
	case "send":
		req := SendRequest{Sender: mustUUID(a[0]), Recipient: participantArg(a[1]), Content: a[2]}
		if ch, ok := kwargs.Get("channel"); ok {
			s, _ := ch.Str()
			req.Channel = &s
		}
		m, err := x.Send(req)
		if err != nil {
			return jsonv.Value{}, err
		}
		return vectors.Summary(m), nil
	case "collect":
		rep, err := x.Collect(mustUUID(a[0]))
		if err != nil {
			return jsonv.Value{}, err
		}
		return jsonv.IntValue(int64(rep.Delivered)), nil
	case "collect_all", "sync":
		all, err := x.CollectAll(context.Background(), ReportOptions{})
		if err != nil {
			return jsonv.Value{}, err
		}
		return jsonv.IntValue(int64(all.Delivered)), nil
	case "receive":
		var sender *uuid.UUID
		if s, ok := kwargs.Get("sender"); ok {
			id := mustUUID(s)
			sender = &id
		}
		var out []jsonv.Value
		for _, m := range x.Receive(mustUUID(a[0]), sender) {
			out = append(out, vectors.Summary(m))
		}
		return jsonv.ArrayValue(out...), nil
	case "pop_message":
		m, ok := x.Pop(mustUUID(a[0]), mustUUID(a[1]))
		if !ok {
			return jsonv.NullValue(), nil
		}
		return vectors.Summary(m), nil
	case "__len__":
		return jsonv.IntValue(int64(x.Len())), nil
	case "has":
		return jsonv.BoolValue(x.Has(mustUUID(a[0]))), nil
	default:
		return jsonv.Value{}, fmt.Errorf("harness: unknown Exchange call %s", call)
	}
}

func runFlowStep(f *flow, step jsonv.Value) (jsonv.Value, error) {
	args, _ := step.Get("args")
	kwargs, _ := step.Get("kwargs")
	a := args.Elems()
	switch call := strField(step, "call"); call {
	case "add_progression":
		spec, _ := a[0].Get("$new")
		kw, _ := spec.Get("kwargs")
		return jsonv.NullValue(), f.addProgressionChecked(strField(kw, "name"))
	case "get_progression":
		name, _ := a[0].Str()
		_, err := f.progression(name)
		return jsonv.NullValue(), err
	case "add_item":
		spec, _ := a[0].Get("$new")
		kw, _ := spec.Get("kwargs")
		m, err := envelope.New(envelope.KindGeneric, kw)
		if err != nil {
			return jsonv.Value{}, err
		}
		return jsonv.NullValue(), f.addItem(m, strField(kwargs, "progressions"))
	case "__len__":
		return jsonv.IntValue(int64(f.len())), nil
	default:
		return jsonv.Value{}, fmt.Errorf("harness: unknown Flow call %s", call)
	}
}

// mustUUID reads a {"$uuid": s} argument; anything else is the zero UUID, which no scenario
// registers, so a harness mistake shows as a mismatch.
func mustUUID(v jsonv.Value) uuid.UUID {
	s := strField(v, "$uuid")
	id, _ := uuid.Parse(s)
	return id
}

// participantArg reads a recipient argument: {"$uuid"} is a UUID, null is None, a string is
// normalised as ADR-0006 D1 says.
func participantArg(v jsonv.Value) envelope.Participant {
	switch {
	case v.IsNull():
		return envelope.None()
	case v.Has("$uuid"):
		return envelope.IDParticipant(mustUUID(v))
	}
	s, _ := v.Str()
	return envelope.ParseParticipant(s)
}

// ownerFlowJSON is the vectors' step result for the flow of a registered owner: {flow,
// progressions, items}; null when the owner is not registered.
func ownerFlowJSON(x *Exchange, owner uuid.UUID) jsonv.Value {
	f := x.lookup(owner)
	if f == nil {
		return jsonv.NullValue()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return flowJSON(owner.String(), f)
}

// sameMessages reports whether s holds the messages of the flow JSON j, progression by progression.
func sameMessages(s *Snapshot, j jsonv.Value) bool {
	want := map[string][]*envelope.Message{outboxName: s.Outbox}
	for _, in := range s.Inboxes {
		want[inboxName(in.Sender)] = in.Messages
	}
	progs, _ := j.Get("progressions")
	if progs.Len() != len(want) {
		return false
	}
	for name, msgs := range want {
		ids, ok := progs.Get(name)
		if !ok || ids.Len() != len(msgs) {
			return false
		}
		for i, id := range ids.Elems() {
			if s, _ := id.Str(); s != msgs[i].ID.String() {
				return false
			}
		}
	}
	return true
}

func flowJSON(name string, f *flow) jsonv.Value {
	views, items := f.views()
	var progs []jsonv.Member
	for _, p := range views {
		progs = append(progs, jsonv.Member{Key: p.Name, Value: vectors.IDs(p.IDs)})
	}
	return vectors.Obj("flow", jsonv.StringValue(name), "progressions", jsonv.ObjectValue(progs...), "items", vectors.IDs(items))
}

func strField(v jsonv.Value, key string) string {
	x, _ := v.Get(key)
	s, _ := x.Str()
	return s
}
