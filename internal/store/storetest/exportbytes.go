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
// ("empty"), and Branch(system="sys") then msgs.add_message(instruction="hi") ("system"); then in
// every mode's text the same replacement of each generated id and created_at by a fixed one.
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
