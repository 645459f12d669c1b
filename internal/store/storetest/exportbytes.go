package storetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// lionExports are LionAGI 0.27.0's own Branch.to_dict bytes (commit 669ea9b5, Python 3.11,
// PYTHONHASHSEED=0), per mode ("db:meta" is db_meta_key="meta"): orjson.dumps of the dict with
// chat_model dropped (historyd has none). Recorded by running it: Branch(user="alice", name="n")
// ("empty"), Branch(system="sys") then msgs.add_message(instruction="hi") ("system"), and
// Branch(user="u", name="n"), msgs.add_message(instruction="hi"), then a selection:
// metadata["current_progression"] = Progression(order=[its id], name="sel") with metadata {"k": 1}
// ("selected"); then in every mode's text the same replacement of each generated id and created_at
// by a fixed one.
//
// The selection is a Progression object in the Branch's metadata, which Element.to_dict dumps as
// pydantic does a nested model, in every mode: {id, created_at, metadata, order, name}, its
// metadata as it is (no lion_class) and never moved to the db-mode key.
//
// What they pin is lionagi/session/branch.py, Branch.to_dict (lines 548-557):
//
//	dict_ = super().to_dict(mode=mode, db_meta_key=db_meta_key, **kw)
//	dict_["messages"] = (
//	    self.messages.to_dict(mode=mode)
//	    if self.messages
//	    else {"collections": [], "progression": {"order": []}}
//	)
//	...
//	if self.system:
//	    dict_["system"] = self.system.to_dict(mode=mode)
//
// A branch with no messages (Pile.__bool__ is a non-empty progression) writes that literal, in
// every mode, not an empty Pile's to_dict. In db mode, Element.to_dict
// (lionagi/protocols/generic/element.py, lines 180-183) has moved the metadata to the end of the
// Element's own dict (id, created_at, user, name) before Branch.to_dict adds messages and system:
// id, created_at, user, name, node_metadata, messages, system.
var lionExports = []struct {
	name  string
	id    string
	modes map[string]string
}{
	{"empty", "00000000-0000-4000-8000-000000000001", map[string]string{
		"python":  `{"id":"00000000-0000-4000-8000-000000000001","created_at":1700000000.1,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":"alice","name":"n","messages":{"collections":[],"progression":{"order":[]}}}`,
		"json":    `{"id":"00000000-0000-4000-8000-000000000001","created_at":1700000000.1,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":"alice","name":"n","messages":{"collections":[],"progression":{"order":[]}}}`,
		"db":      `{"id":"00000000-0000-4000-8000-000000000001","created_at":1700000000.1,"user":"alice","name":"n","node_metadata":{"lion_class":"lionagi.session.branch.Branch"},"messages":{"collections":[],"progression":{"order":[]}}}`,
		"db:meta": `{"id":"00000000-0000-4000-8000-000000000001","created_at":1700000000.1,"user":"alice","name":"n","meta":{"lion_class":"lionagi.session.branch.Branch"},"messages":{"collections":[],"progression":{"order":[]}}}`,
	}},
	{"system", "00000000-0000-4000-8000-000000000011", map[string]string{
		"python":  `{"id":"00000000-0000-4000-8000-000000000011","created_at":1700000000.11,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":null,"name":null,"messages":{"id":"00000000-0000-4000-8000-000000000012","created_at":1700000000.12,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"},{"id":"00000000-0000-4000-8000-000000000015","created_at":1700000000.15,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000013","created_at":1700000000.13,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000014","00000000-0000-4000-8000-000000000015"],"name":null},"strict_type":false},"system":{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"}}`,
		"json":    `{"id":"00000000-0000-4000-8000-000000000011","created_at":1700000000.11,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":null,"name":null,"messages":{"id":"00000000-0000-4000-8000-000000000012","created_at":1700000000.12,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"},{"id":"00000000-0000-4000-8000-000000000015","created_at":1700000000.15,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000013","created_at":1700000000.13,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000014","00000000-0000-4000-8000-000000000015"],"name":null},"strict_type":false},"system":{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"}}`,
		"db":      `{"id":"00000000-0000-4000-8000-000000000011","created_at":1700000000.11,"user":null,"name":null,"node_metadata":{"lion_class":"lionagi.session.branch.Branch"},"messages":{"id":"00000000-0000-4000-8000-000000000012","created_at":1700000000.12,"collections":[{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"},{"id":"00000000-0000-4000-8000-000000000015","created_at":1700000000.15,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000013","created_at":1700000000.13,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000014","00000000-0000-4000-8000-000000000015"],"name":null},"strict_type":false,"node_metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"}},"system":{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system","node_metadata":{"lion_class":"lionagi.protocols.messages.system.System"}}}`,
		"db:meta": `{"id":"00000000-0000-4000-8000-000000000011","created_at":1700000000.11,"user":null,"name":null,"meta":{"lion_class":"lionagi.session.branch.Branch"},"messages":{"id":"00000000-0000-4000-8000-000000000012","created_at":1700000000.12,"collections":[{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"metadata":{"lion_class":"lionagi.protocols.messages.system.System"},"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system"},{"id":"00000000-0000-4000-8000-000000000015","created_at":1700000000.15,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000013","created_at":1700000000.13,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000014","00000000-0000-4000-8000-000000000015"],"name":null},"strict_type":false,"node_metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"}},"system":{"id":"00000000-0000-4000-8000-000000000014","created_at":1700000000.14,"content":{"system_message":"sys"},"embedding":null,"sender":"system","recipient":"00000000-0000-4000-8000-000000000011","channel":null,"role":"system","node_metadata":{"lion_class":"lionagi.protocols.messages.system.System"}}}`,
	}},
	{"selected", "00000000-0000-4000-8000-000000000021", map[string]string{
		"python":  `{"id":"00000000-0000-4000-8000-000000000021","created_at":1700000000.21,"metadata":{"current_progression":{"id":"00000000-0000-4000-8000-000000000025","created_at":1700000000.25,"metadata":{"k":1},"order":["00000000-0000-4000-8000-000000000024"],"name":"sel"},"lion_class":"lionagi.session.branch.Branch"},"user":"u","name":"n","messages":{"id":"00000000-0000-4000-8000-000000000022","created_at":1700000000.22,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[{"id":"00000000-0000-4000-8000-000000000024","created_at":1700000000.24,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000023","created_at":1700000000.23,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000024"],"name":null},"strict_type":false}}`,
		"json":    `{"id":"00000000-0000-4000-8000-000000000021","created_at":1700000000.21,"metadata":{"current_progression":{"id":"00000000-0000-4000-8000-000000000025","created_at":1700000000.25,"metadata":{"k":1},"order":["00000000-0000-4000-8000-000000000024"],"name":"sel"},"lion_class":"lionagi.session.branch.Branch"},"user":"u","name":"n","messages":{"id":"00000000-0000-4000-8000-000000000022","created_at":1700000000.22,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[{"id":"00000000-0000-4000-8000-000000000024","created_at":1700000000.24,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000023","created_at":1700000000.23,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000024"],"name":null},"strict_type":false}}`,
		"db":      `{"id":"00000000-0000-4000-8000-000000000021","created_at":1700000000.21,"user":"u","name":"n","node_metadata":{"current_progression":{"id":"00000000-0000-4000-8000-000000000025","created_at":1700000000.25,"metadata":{"k":1},"order":["00000000-0000-4000-8000-000000000024"],"name":"sel"},"lion_class":"lionagi.session.branch.Branch"},"messages":{"id":"00000000-0000-4000-8000-000000000022","created_at":1700000000.22,"collections":[{"id":"00000000-0000-4000-8000-000000000024","created_at":1700000000.24,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000023","created_at":1700000000.23,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000024"],"name":null},"strict_type":false,"node_metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"}}}`,
		"db:meta": `{"id":"00000000-0000-4000-8000-000000000021","created_at":1700000000.21,"user":"u","name":"n","meta":{"current_progression":{"id":"00000000-0000-4000-8000-000000000025","created_at":1700000000.25,"metadata":{"k":1},"order":["00000000-0000-4000-8000-000000000024"],"name":"sel"},"lion_class":"lionagi.session.branch.Branch"},"messages":{"id":"00000000-0000-4000-8000-000000000022","created_at":1700000000.22,"collections":[{"id":"00000000-0000-4000-8000-000000000024","created_at":1700000000.24,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"hi"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}],"progression":{"id":"00000000-0000-4000-8000-000000000023","created_at":1700000000.23,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-000000000024"],"name":null},"strict_type":false,"node_metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"}}}`,
	}},
}

// exportModes are the modes of lionExports: the mode and db_meta_key.
var exportModes = []struct {
	name string
	mode envelope.Mode
	key  string
}{
	{"python", envelope.ModePython, ""},
	{"json", envelope.ModeJSON, ""},
	{"db", envelope.ModeDB, ""},
	{"db:meta", envelope.ModeDB, "meta"},
}

// testExportLionAGIBytes: ExportBranch promises LionAGI's own bytes (docs/design.md#import-export).
// Each of LionAGI's exports (lionExports) imports, in every mode it was written in, and the branch
// then exports in every mode as LionAGI wrote it, byte for byte: the empty branch's messages literal
// and the db-mode key order included. A branch made empty here (created without a system, or
// cleared) exports the same literal.
func testExportLionAGIBytes(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	for _, tc := range lionExports {
		id := uuid.MustParse(tc.id)
		for _, from := range exportModes {
			t.Run(tc.name+"/from "+from.name, func(t *testing.T) {
				res, err := st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, tc.modes[from.name]), DBMetaKey: from.key})
				if err != nil {
					t.Fatalf("import of LionAGI's %s export: %v", from.name, err)
				}
				if res.Branch.ID != id {
					t.Fatalf("imported as %s, want the payload's id %s", res.Branch.ID, id)
				}
				t.Cleanup(func() {
					if _, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{}); err != nil {
						t.Errorf("DeleteBranch: %v", err)
					}
				})
				for _, to := range exportModes {
					exp, err := st.ExportBranch(ctx(t), id, store.ExportInput{Mode: to.mode, DBMetaKey: to.key})
					if err != nil {
						t.Fatalf("export %s: %v", to.name, err)
					}
					if got, want := string(jsonv.Marshal(exp.Data)), tc.modes[to.name]; got != want {
						t.Errorf("export %s:\n got  %s\n want %s (LionAGI's)", to.name, got, want)
					}
				}
			})
		}
	}

	empty := `{"collections":[],"progression":{"order":[]}}`
	b, err := st.CreateBranch(ctx(t), store.CreateBranchInput{User: ptr("alice")})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"created", "cleared"} {
		if step == "cleared" {
			addInstruction(t, st, b.Branch.ID, "x")
			if _, err := st.ClearMessages(ctx(t), b.Branch.ID, store.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, to := range exportModes {
			exp, err := st.ExportBranch(ctx(t), b.Branch.ID, store.ExportInput{Mode: to.mode, DBMetaKey: to.key})
			if err != nil {
				t.Fatal(err)
			}
			if msgs, _ := exp.Data.Get("messages"); string(jsonv.Marshal(msgs)) != empty {
				t.Errorf("%s, export %s: messages = %s, want LionAGI's %s", step, to.name, msgs, empty)
			}
		}
	}
}

// lionFloatsIn is a Branch.to_dict-shaped history whose timestamps and embedding are floats
// (and integers and strings given for floats) that Python's repr and orjson write differently.
// lionFloatsOut is what LionAGI 0.27.0 writes for it, recorded by running it (commit 669ea9b5,
// Python 3.11, orjson 3.8.3): orjson.dumps(Branch.from_dict(orjson.loads(lionFloatsIn))
// .to_dict(mode="json")) with chat_model dropped. Every float is in orjson's notation ("1e16",
// "1e-7", "0.00001", "1.8446744073709552e19"), not Python's repr ("1e+16", "1e-07", "1e-05");
// an integer given for a float is a float ("1700000000.0", "3.0"), and the integer -0 is 0.0.
const lionFloatsIn = `{"id":"00000000-0000-4000-8000-0000000000f1","created_at":1e16,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":null,"name":null,"messages":{"id":"00000000-0000-4000-8000-0000000000f2","created_at":1E5,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[` +
	`{"id":"00000000-0000-4000-8000-0000000000f4","created_at":1e-7,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"a"},"embedding":[1e16,1e-7,2.5e-05,5e-324,1e22,-0.0,3],"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f5","created_at":0.30000000000000004,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"b"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f6","created_at":5e-324,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"c"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f7","created_at":1700000000,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"d"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f8","created_at":-0,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"e"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f9","created_at":"1e-5","metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"f"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000fa","created_at":18446744073709551616,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"g"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}` +
	`],"progression":{"id":"00000000-0000-4000-8000-0000000000f3","created_at":1e-7,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-0000000000f4","00000000-0000-4000-8000-0000000000f5","00000000-0000-4000-8000-0000000000f6","00000000-0000-4000-8000-0000000000f7","00000000-0000-4000-8000-0000000000f8","00000000-0000-4000-8000-0000000000f9","00000000-0000-4000-8000-0000000000fa"],"name":null},"strict_type":false}}`

const lionFloatsOut = `{"id":"00000000-0000-4000-8000-0000000000f1","created_at":1e16,"metadata":{"lion_class":"lionagi.session.branch.Branch"},"user":null,"name":null,"messages":{"id":"00000000-0000-4000-8000-0000000000f2","created_at":100000.0,"metadata":{"lion_class":"lionagi.protocols.generic.pile.Pile"},"collections":[` +
	`{"id":"00000000-0000-4000-8000-0000000000f4","created_at":1e-7,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"a"},"embedding":[1e16,1e-7,0.000025,5e-324,1e22,-0.0,3.0],"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f5","created_at":0.30000000000000004,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"b"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f6","created_at":5e-324,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"c"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f7","created_at":1700000000.0,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"d"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f8","created_at":0.0,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"e"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000f9","created_at":0.00001,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"f"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"},` +
	`{"id":"00000000-0000-4000-8000-0000000000fa","created_at":1.8446744073709552e19,"metadata":{"lion_class":"lionagi.protocols.messages.instruction.Instruction"},"content":{"instruction":"g"},"embedding":null,"sender":null,"recipient":null,"channel":null,"role":"user"}` +
	`],"progression":{"id":"00000000-0000-4000-8000-0000000000f3","created_at":1e-7,"metadata":{"lion_class":"lionagi.protocols.generic.progression.Progression"},"order":["00000000-0000-4000-8000-0000000000f4","00000000-0000-4000-8000-0000000000f5","00000000-0000-4000-8000-0000000000f6","00000000-0000-4000-8000-0000000000f7","00000000-0000-4000-8000-0000000000f8","00000000-0000-4000-8000-0000000000f9","00000000-0000-4000-8000-0000000000fa"],"name":null},"strict_type":false}}`

// testExportFloatsAsOrjson: the floats historyd keeps as numbers (created_at, embedding) are
// exported in orjson's notation, as LionAGI writes them (lionFloatsIn, lionFloatsOut).
func testExportFloatsAsOrjson(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	res, err := st.ImportBranch(ctx(t), store.ImportInput{Data: mustJSON(t, lionFloatsIn)})
	if err != nil {
		t.Fatal(err)
	}
	exp, err := st.ExportBranch(ctx(t), res.Branch.ID, store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(jsonv.Marshal(exp.Data)); got != lionFloatsOut {
		t.Errorf("export:\n got  %s\n want %s (LionAGI's)", got, lionFloatsOut)
	}
}
