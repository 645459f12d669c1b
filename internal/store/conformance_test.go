package store_test

import (
	"fmt"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

// storeGroups are the vector groups whose scenarios this package answers
// for (issue 4: manager, hooks, branch, progression, pile).
var storeGroups = map[string]bool{"manager": true, "hooks": true, "branch": true, "progression": true, "pile": true}

// notReplayed lists the records the Go API cannot express at all, with the
// reason. They are counted, never silently skipped.
var notReplayed = map[string]string{
	"Pile operations": "historyd has no general-purpose Pile of Elements: a branch is its only Pile, whose " +
		"membership and order follow ADR-0006 D3 (the manager records replay that), and its Pile JSON is " +
		"checked by the import/export tests",
	"Progression operations": "not applicable (issue 13 item 11): historyd has no Progression list API " +
		"(include, exclude, insert, pop, popleft, remove, index); it only stores, checks and encodes a branch's " +
		"progression, which the manager records and SetProgression's tests replay. The operations that lived in " +
		"export_test.go were test-only code, so scoring this record against them counted nothing of historyd",
}

// stepDifferences lists, per record, the steps where historyd deliberately
// differs from the recorded LionAGI 0.27 output, with the reason and what
// historyd must produce instead (same step format; placeholders bind as in
// the record).
var stepDifferences = map[string]map[int]struct {
	reason string
	want   string
}{
	"add/replace ordering + views + to_chat_msgs": {
		7: {"docs/design.md#branches: re-sending the current system's id updates the system (LionAGI's ExistsError is an accident of its Pile)",
			`{"result": "<s2>", "read": {"mm.progression": ["<s2>", "<i1>", "<a1>"]}}`},
	},
	"constructor variants + set_system": {
		3: {"historyd has one constructor, the Branch's, which builds a System from text (ADR-0006 D3 Branch facade); " +
			"MessageManager's rejection of a non-System value has no counterpart in the typed Go API",
			`{"result": {"progression": ["<sys3>"]}}`},
		8: {"docs/design.md#branches: set_system with the current system's id updates it in place",
			`{"result": null, "read": {"mm6.progression": ["<sys_obj>", "<x>"]}}`},
	},
	"sync add_message: one failing hook among three": {
		3: {"the recorded group counts the recording harness's own AttributeError (its append_hook looked up " +
			"_on_message_added on the list); here the append succeeds, so only h2 fails — and 'late' still does not " +
			"fire for this add (ADR-0006 D4 snapshot isolation, checked by the next step)",
			`{"error": {"type": "ExceptionGroup", "exceptions": [{"type": "RuntimeError", "message": "h2 failed"}]}}`},
	},
	"create_message(assistant_response=<provider dict>) stores the dict unparsed": {
		0: {"ADR-0006 D2: from_response extracts the text; the raw value goes to metadata.model_response",
			`{"result": {"id": "<m>", "class": "AssistantResponse", "sender": null, "recipient": null, "channel": null, "content": {"assistant_response": "hi"}}, "read": {"m.chat_msg": {"role": "assistant", "content": "hi"}}}`},
	},
	"create_action_response with a prebuilt ActionResponse": {
		0: {"ActionResponse.error is kept (ADR-0006 D2 action response state; docs/design.md#differs)",
			`{"result": {"id": "<pre>", "class": "ActionResponse", "sender": "unset", "recipient": "unset", "channel": null, "content": {"output": 1, "function": "g", "arguments": {}, "error": "e"}}}`},
		2: {"ActionResponse.error is kept through update (ADR-0006 D2); no reciprocal link is made for a pre-built response",
			`{"result": {"id": "<pre>", "class": "ActionResponse", "sender": "unset", "recipient": "unset", "channel": null, "content": {"function": "g", "arguments": {}, "error": "e"}}, "read": {"r.content.output": null, "r.content.error": "e", "req.content.action_response_id": null}}`},
	},
	"Branch.clone duplicates the system message": {
		3: {"docs/design.md#branches: a fork has exactly one system, at index 0",
			`{"result": "<c>", "read": {"c.messages": ["<c_sys>", "<c_ins>"]}}`},
	},
}

// TestConformance replays the scenario records of the manager, hooks,
// branch, progression and pile groups step by step through the Go API
// (issue 4, acceptance), and prints the tally line.
func TestConformance(t *testing.T) {
	recs := vectors.ForTest(t)
	var tally vectors.Tally
	notReplayedCount := 0
	for _, r := range recs {
		if !storeGroups[r.Group] {
			continue
		}
		if r.IsPythonOnly() {
			tally.PythonOnly++
			continue
		}
		if reason, ok := notReplayed[r.Name]; ok {
			t.Logf("not replayed: %s: %s", r.Name, reason)
			notReplayedCount++
			continue
		}
		t.Run(fmt.Sprintf("L%03d_%s_%s", r.Line, r.Group, r.Name), func(t *testing.T) {
			want := wantSteps(t, r)
			got := replayScenario(t, r)
			if d := vectors.MatchSteps(want, got, r.Expect == "differs" && r.HasHD); d != "" {
				tally.Failed++
				t.Errorf("%s\n  %s", r.Name, d)
				return
			}
			if r.Expect == "differs" || len(stepDifferences[r.Name]) > 0 {
				tally.Differ++
			} else {
				tally.Matched++
			}
		})
	}
	line := fmt.Sprintf("%s, %d not applicable or not expressible (listed)", tally, notReplayedCount)
	t.Log(line)
	fmt.Println("store", line)
	if tally.Matched == 0 {
		t.Fatal("no store record was replayed")
	}
}

// wantSteps returns the expected steps with the listed differences applied.
func wantSteps(t *testing.T, r vectors.Record) jsonv.Value {
	want := r.Want()
	diffs := stepDifferences[r.Name]
	if len(diffs) == 0 {
		return want
	}
	steps := append([]jsonv.Value(nil), want.Elems()...)
	for i, d := range diffs {
		v, err := jsonv.ParseString(d.want)
		if err != nil || i >= len(steps) {
			t.Fatalf("bad stepDifferences entry %s[%d]: %v", r.Name, i, err)
		}
		t.Logf("step %d differs deliberately: %s", i, d.reason)
		steps[i] = v
	}
	return jsonv.ArrayValue(steps...)
}
