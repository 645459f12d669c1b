package server

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// richBranchOverGRPC builds, through the API, a branch with every kind of message, exact numbers
// in metadata, and a selected progression.
func richBranchOverGRPC(t *testing.T, f *historyFixture) string {
	t.Helper()
	ctx := testContext(t)
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: `{"messages": {"collections": []}, "user": "alice", "name": "rich", "metadata": {"score": 1.50, "n": 30}}`, NewBranchId: true})
	if err != nil {
		t.Fatal(err)
	}
	b := imp.GetBranch().GetId()
	f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{
		SystemMessage: strPtr("You are S"), SystemDatetime: &historyv1.SystemInput_DatetimeText{DatetimeText: "2024"}}}})
	ins := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Sender: sval("alice"), Recipient: sval(b), Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "Add"}, ContextJson: []string{`{"a": 30, "b": 30.0}`},
		ToolSchemasJson: []string{`{"name": "add"}`}, ResponseFormatJson: strPtr(`{"sum": 0}`)}}}).GetMessage()
	f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
		Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: `{"choices": [{"message": {"content": "ok"}}], "usage": {"total_tokens": 12}}`}}}})
	req := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{
		Function: "add", ArgumentsJson: `{"a": 30, "b": 12.5}`}}}).GetMessage()
	if _, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: req.GetId(), OutputJson: strPtr("42.5"), Error: strPtr("slow")}); err != nil {
		t.Fatal(err)
	}
	f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
		Recipient: structpb.NewNullValue(), Channel: strPtr("c"),
		Content: &historyv1.Message_Generic{Generic: &historyv1.GenericContent{ContentJson: strPtr(`{"text": "hi", "n": null}`)}}}}})
	if _, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, Progression: &historyv1.MessageIds{Ids: []string{ins.GetId()}}}); err != nil {
		t.Fatal(err)
	}
	return b
}

func exportJSON(t *testing.T, f *historyFixture, branch string, mode historyv1.SerializationMode) jsonv.Value {
	t.Helper()
	resp, err := f.c.ExportBranch(testContext(t), &historyv1.ExportBranchRequest{BranchId: branch, Mode: mode})
	if err != nil {
		t.Fatalf("ExportBranch: %v", err)
	}
	v, err := jsonv.ParseString(resp.GetData())
	if err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	return v
}

func get(v jsonv.Value, keys ...string) jsonv.Value {
	for _, k := range keys {
		v, _ = v.Get(k)
	}
	return v
}

// TestHistoryImportExportShapesAndModes: issue 4 acceptance: ImportBranch of each shape (Branch,
// Pile, array) in each mode (python, json, db), and ExportBranch giving back the same messages in
// the same order, equal as JSON values; export always writes the Branch shape (
// docs/design.md#branches).
func TestHistoryImportExportShapesAndModes(t *testing.T) {
	f := newHistoryFixture(t)
	src := richBranchOverGRPC(t, f)
	for _, mode := range []historyv1.SerializationMode{
		historyv1.SerializationMode_SERIALIZATION_MODE_PYTHON, historyv1.SerializationMode_SERIALIZATION_MODE_JSON, historyv1.SerializationMode_SERIALIZATION_MODE_DB,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			exp := exportJSON(t, f, src, mode)
			metaKey := "metadata"
			if mode == historyv1.SerializationMode_SERIALIZATION_MODE_DB {
				metaKey = "node_metadata"
			}
			if lc, _ := get(exp, metaKey, "lion_class").Str(); lc != "lionagi.session.branch.Branch" {
				t.Errorf("export lion_class = %q", lc)
			}
			if get(exp, metaKey, "score").Literal() != "1.50" {
				t.Errorf("metadata number lost its literal: %s", get(exp, metaKey))
			}
			want := get(exp, "messages", "collections").Elems()
			if len(want) != 6 {
				t.Fatalf("export holds %d messages, want 6", len(want))
			}
			for _, shape := range []struct {
				name string
				data jsonv.Value
			}{
				{"Branch", exp},
				{"Pile", get(exp, "messages")},
				{"array", jsonv.ArrayValue(want...)},
			} {
				t.Run(shape.name, func(t *testing.T) {
					imp, err := f.c.ImportBranch(testContext(t), &historyv1.ImportBranchRequest{Data: shape.data.String(), NewBranchId: true})
					if err != nil {
						t.Fatalf("ImportBranch: %v", err)
					}
					back := exportJSON(t, f, imp.GetBranch().GetId(), mode)
					if back.Has("collections") || !back.Has("messages") {
						t.Fatalf("export is not the Branch shape: %s", back)
					}
					got := get(back, "messages", "collections").Elems()
					if len(got) != len(want) {
						t.Fatalf("re-export holds %d messages, want %d", len(got), len(want))
					}
					for i := range want {
						if !jsonv.Equal(got[i], want[i]) {
							t.Errorf("message %d differs:\n got  %s\n want %s", i, got[i], want[i])
						}
					}
					if shape.name == "Branch" && !imp.GetBranch().GetProgressionSelected() {
						t.Error("the selected progression did not travel in metadata.current_progression")
					}
				})
			}
		})
	}
}

// TestHistoryImportCustomDBMetaKey (review MINOR 5): a db-mode export written with db_meta_key
// "meta" imports back with the same db_meta_key, the same messages in the same order. (Issue 13
// item 6: as in LionAGI 0.27 only the Branch's own metadata is under the custom key; the messages
// carry theirs under metadata, so an import without the key no longer fails on them.)
func TestHistoryImportCustomDBMetaKey(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	src := richBranchOverGRPC(t, f)
	exp, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: src, Mode: historyv1.SerializationMode_SERIALIZATION_MODE_DB, DbMetaKey: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: exp.GetData(), NewBranchId: true, DbMetaKey: "meta"})
	if err != nil {
		t.Fatalf("ImportBranch with db_meta_key meta: %v", err)
	}
	if !imp.GetBranch().GetProgressionSelected() || imp.GetBranch().GetUser() != "alice" {
		t.Errorf("imported branch = %v", imp.GetBranch())
	}
	back, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: imp.GetBranch().GetId(), Mode: historyv1.SerializationMode_SERIALIZATION_MODE_DB, DbMetaKey: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := jsonv.ParseString(exp.GetData())
	got, _ := jsonv.ParseString(back.GetData())
	if w, g := get(want, "messages", "collections"), get(got, "messages", "collections"); !jsonv.Equal(w, g) {
		t.Errorf("re-export differs:\n got  %s\n want %s", g, w)
	}
	if s := get(got, "meta", "score"); s.Literal() != "1.50" {
		t.Errorf("branch metadata under meta = %s", get(got, "meta"))
	}
}

// TestDBModeNestedMetadataKeys: issue 13 item 6. LionAGI 0.27 (Branch.to_dict and Pile's
// field serializers, commit 669ea9b5; checked by running it: Branch(system="s"), add_message(
// instruction="hi"), to_dict(mode="db", db_meta_key="meta")) renames only the top of each
// to_dict(mode="db") call: the Branch's metadata under the custom key, the Pile's and the system's
// under node_metadata, the collections' and the Pile progression's under metadata.
func TestDBModeNestedMetadataKeys(t *testing.T) {
	f := newHistoryFixture(t)
	src := richBranchOverGRPC(t, f)
	for _, key := range []string{"", "meta"} {
		exp, err := f.c.ExportBranch(testContext(t), &historyv1.ExportBranchRequest{BranchId: src, Mode: historyv1.SerializationMode_SERIALIZATION_MODE_DB, DbMetaKey: key})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := jsonv.ParseString(exp.GetData())
		top := key
		if top == "" {
			top = "node_metadata"
		}
		checks := []struct {
			what string
			v    jsonv.Value
			key  string
		}{
			{"branch", v, top},
			{"pile", get(v, "messages"), "node_metadata"},
			{"pile progression", get(v, "messages", "progression"), "metadata"},
			{"system", get(v, "system"), "node_metadata"},
		}
		for i, c := range get(v, "messages", "collections").Elems() {
			checks = append(checks, struct {
				what string
				v    jsonv.Value
				key  string
			}{fmt.Sprintf("collections[%d]", i), c, "metadata"})
		}
		for _, c := range checks {
			for _, k := range []string{"metadata", "node_metadata", "meta"} {
				if c.v.Has(k) != (k == c.key) {
					t.Errorf("db_meta_key %q: %s has %s: %v, want its metadata under %s only", key, c.what, k, c.v.Has(k), c.key)
				}
			}
		}
	}
}

// TestHistoryImportLionAGIShapes imports hand-written LionAGI JSON (db-mode Pile with
// node_metadata, a later System replacing an earlier one) and checks the D3 replay, and the
// import errors of issue 4 "Bad input": not JSON, non-object metadata (naming the field), an
// existing id (ALREADY_EXISTS).
func TestHistoryImportLionAGIShapes(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	s1, s2, i1 := uuid.NewString(), uuid.NewString(), uuid.NewString()
	pile := `{"id": "` + uuid.NewString() + `", "created_at": 1700000000.0,
	  "collections": [
	    {"id": "` + s1 + `", "created_at": 1700000000.0, "content": {"system_message": "old"}, "embedding": null, "sender": "system", "recipient": "assistant", "channel": null, "role": "system", "node_metadata": {"lion_class": "lionagi.protocols.messages.system.System"}},
	    {"id": "` + i1 + `", "created_at": 1700000001.5, "content": {"instruction": "hi"}, "embedding": null, "sender": "user", "recipient": "assistant", "channel": null, "role": "user", "node_metadata": {"lion_class": "lionagi.protocols.messages.instruction.Instruction"}},
	    {"id": "` + s2 + `", "created_at": 1700000002.0, "content": {"system_message": "new"}, "embedding": null, "sender": "system", "recipient": "assistant", "channel": null, "role": "system", "node_metadata": {"lion_class": "System"}}
	  ],
	  "progression": {"id": "` + uuid.NewString() + `", "created_at": 1700000000.0, "order": ["` + s1 + `", "` + i1 + `", "` + s2 + `"], "name": null, "node_metadata": {"lion_class": "lionagi.protocols.generic.progression.Progression"}},
	  "strict_type": false, "node_metadata": {"lion_class": "lionagi.protocols.generic.pile.Pile"}}`
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: pile})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.ids(t, imp.GetBranch().GetId(), nil); joinIDs(got) != joinIDs([]string{s2, i1}) {
		t.Errorf("replayed order = %v, want the later system at index 0, then the instruction", got)
	}

	for _, tc := range []struct{ name, data, field string }{
		{"not JSON", `{"messages": [`, "data"},
		{"message metadata not an object", `[{"content": {"instruction": "x"}, "metadata": ["no"]}]`, "data[0].metadata"},
		{"branch metadata not an object", `{"messages": {"collections": []}, "metadata": 5}`, "data.metadata"},
		{"neither shape", `{"foo": 1}`, "data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: tc.data})
			wantField(t, err, tc.field)
		})
	}
	exp := f.export(t, imp.GetBranch().GetId())
	_, err = f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: exp})
	wantStatus(t, err, codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_BRANCH_ALREADY_EXISTS)
	chosen := uuid.NewString()
	again, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: exp, BranchId: chosen})
	if err != nil || again.GetBranch().GetId() != chosen {
		t.Errorf("import under a chosen id = %v, %v", again, err)
	}
	_, err = f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: chosen, Mode: historyv1.SerializationMode(9)})
	wantField(t, err, "mode")
}

// TestDBMetaKeyNamingAFieldIsRefused: a db_meta_key that names a field the db-mode dicts already
// have would write that key twice in ExportBranch's JSON (the branch's id and its metadata both
// under "id"), and on import read a field as the metadata. LionAGI 0.27's to_dict overwrites the
// field with the metadata instead (its own data lost; checked by running it, to_dict(mode="db",
// db_meta_key="id")); historyd refuses such a key, INVALID_ARGUMENT naming db_meta_key, on all four
// calls that take one (docs/decisions/0012).
func TestDBMetaKeyNamingAFieldIsRefused(t *testing.T) {
	f := newHistoryFixture(t)
	src := richBranchOverGRPC(t, f)
	db := historyv1.SerializationMode_SERIALIZATION_MODE_DB
	exp, err := f.c.ExportBranch(testContext(t), &historyv1.ExportBranchRequest{BranchId: src, Mode: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"id", "created_at", "user", "name", "messages", "system", "order", "content", "role", "sender", "chat_model", "log_config"} {
		t.Run(key, func(t *testing.T) {
			ctx := testContext(t)
			_, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: src, Mode: db, DbMetaKey: key})
			wantField(t, err, "db_meta_key")
			stream, err := f.c.ExportBranchStream(ctx, &historyv1.ExportBranchStreamRequest{BranchId: src, Mode: db, DbMetaKey: key})
			if err == nil {
				_, err = stream.Recv()
			}
			wantField(t, err, "db_meta_key")
			_, err = f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: exp.GetData(), NewBranchId: true, DbMetaKey: key})
			wantField(t, err, "db_meta_key")
			up, err := f.c.ImportBranchStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := up.Send(&historyv1.ImportBranchStreamRequest{Data: []byte(exp.GetData()), NewBranchId: true, DbMetaKey: key}); err != nil {
				t.Fatal(err)
			}
			_, err = up.CloseAndRecv()
			wantField(t, err, "db_meta_key")
		})
	}
	// Keys that name no field stay accepted, metadata included (json mode's own key).
	for _, key := range []string{"meta", "metadata", "node_metadata"} {
		if _, err := f.c.ExportBranch(testContext(t), &historyv1.ExportBranchRequest{BranchId: src, Mode: db, DbMetaKey: key}); err != nil {
			t.Errorf("db_meta_key %q: %v", key, err)
		}
	}
}
