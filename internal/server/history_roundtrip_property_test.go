package server

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"testing/quick"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// TestExportImportRoundTripProperty: issue 13, the property-based test. Random histories built
// through AddMessage (the shapes of items 1-7 among the inputs: re-added and replaced messages, a
// later System, raw provider responses of every kind, images, unusual participants and scalars,
// contexts replaced with an empty list, deep values), then ExportBranch, ImportBranch of that text
// into a new branch id, ExportBranch again: the same JSON value but for the branch id and the
// branch's created_at, in every mode; and ToChatMessages and every message's rendered are
// byte-identical on both branches.
func TestExportImportRoundTripProperty(t *testing.T) {
	f := newHistoryFixture(t)
	prop := func(seed int64) bool {
		rng := rand.New(rand.NewSource(seed))
		b := f.create(t, randomCreate(rng))
		writes := buildRandomHistory(t, f, b, rng)
		if d := roundTripDiff(t, f, b); d != "" {
			t.Errorf("seed %d (%d writes): %s", seed, writes, d)
			return false
		}
		if writes == 0 {
			t.Errorf("seed %d: the generator made no accepted write", seed)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 40}); err != nil {
		t.Error(err)
	}
}

func randomCreate(rng *rand.Rand) *historyv1.CreateBranchRequest {
	req := &historyv1.CreateBranchRequest{}
	if rng.Intn(2) == 0 {
		text := randomText(rng)
		req.System = &historyv1.SystemInput{SystemMessage: &text}
	}
	if rng.Intn(2) == 0 {
		u := "alice"
		req.User = &u
	}
	return req
}

var randomTexts = []string{"hi", "", "Ünïcödé ✓", "line\nbreak", "tab\there", `quote "q"`, "30", "None", "- a: 1"}

func randomText(rng *rand.Rand) string { return randomTexts[rng.Intn(len(randomTexts))] }

// randomJSON returns JSON text of a random value: scalars whose text matters (30 and 30.0, 1e3,
// -0.5, unicode), arrays and objects in insertion order, nested up to depth.
func randomJSON(rng *rand.Rand, depth int) string {
	scalars := []string{`null`, `true`, `false`, `0`, `30`, `30.0`, `-0.5`, `1e3`, `12345678901234567890`, `"x"`, `""`, `"Ünï ✓"`, `"a\nb"`}
	if depth <= 0 || rng.Intn(3) == 0 {
		return scalars[rng.Intn(len(scalars))]
	}
	n := rng.Intn(4)
	parts := make([]string, n)
	if rng.Intn(2) == 0 {
		for i := range parts {
			parts[i] = randomJSON(rng, depth-1)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	keys := []string{"b", "a", "z", "key with space", "ключ", "1"}
	for i := range parts {
		parts[i] = fmt.Sprintf("%q: %s", keys[rng.Intn(len(keys))], randomJSON(rng, depth-1))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func randomParticipant(rng *rand.Rand) *structpb.Value {
	switch rng.Intn(8) {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewStringValue("user")
	case 2:
		return structpb.NewStringValue("assistant")
	case 3:
		return structpb.NewStringValue(uuid.NewString())
	case 4:
		return structpb.NewStringValue("alice")
	case 5:
		return structpb.NewStringValue("unset")
	}
	return nil
}

var randomImages = []string{"https://example.com/a.png", "HTTPS://example.com/b.png", "data:image/png;base64,iVBORw0KGgo=", "iVBORw0KGgo="}

// buildRandomHistory writes 5 to 24 random AddMessage and CreateActionResponse calls; refused
// writes (INVALID_ARGUMENT for inputs the random choice got wrong) are skipped. It returns how many
// writes were accepted.
func buildRandomHistory(t *testing.T, f *historyFixture, b string, rng *rand.Rand) int {
	ctx := testContext(t)
	var instructions, requests []string
	accepted := 0
	for range 5 + rng.Intn(20) {
		req := &historyv1.AddMessageRequest{BranchId: b, Sender: randomParticipant(rng), Recipient: randomParticipant(rng)}
		var kind string
		switch rng.Intn(9) {
		case 0, 1:
			kind = "instruction"
			in := &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: randomText(rng)}}
			if rng.Intn(3) == 0 {
				in.InstructionValue = &historyv1.InstructionInput_InstructionJson{InstructionJson: randomJSON(rng, 2)}
			}
			for range rng.Intn(3) {
				in.ContextJson = append(in.ContextJson, randomJSON(rng, 3))
			}
			if rng.Intn(3) == 0 {
				g := randomText(rng)
				in.GuidanceValue = &historyv1.InstructionInput_Guidance{Guidance: g}
			}
			if rng.Intn(4) == 0 {
				in.ToolSchemasJson = []string{`{"name": "t", "parameters": {"x": 1.0}}`}
			}
			if rng.Intn(4) == 0 {
				in.Images = []string{randomImages[rng.Intn(len(randomImages))]}
			}
			if rng.Intn(5) == 0 {
				rf := `{"answer": "str", "n": 1}`
				in.ResponseFormatJson = &rf
			}
			req.Input = &historyv1.AddMessageRequest_Instruction{Instruction: in}
		case 2:
			if len(instructions) == 0 {
				continue
			}
			// Re-add an instruction: its context extended, or replaced (an empty list included).
			kind = "readd"
			in := &historyv1.InstructionInput{}
			if rng.Intn(2) == 0 {
				in.HandleContext = historyv1.ContextMode_CONTEXT_MODE_REPLACE
				in.ContextJsonList = &historyv1.StringList{}
				if rng.Intn(2) == 0 {
					in.ContextJsonList.Values = []string{randomJSON(rng, 2)}
				}
			} else {
				in.ContextJson = []string{randomJSON(rng, 2)}
			}
			req.TargetId = instructions[rng.Intn(len(instructions))]
			req.Input = &historyv1.AddMessageRequest_Instruction{Instruction: in}
		case 3:
			kind = "system"
			text := randomText(rng)
			req.Input = &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{SystemMessage: &text}}
		case 4:
			kind = "assistant"
			req.Input = &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
				Response: &historyv1.AssistantResponseInput_Text{Text: "answer " + randomText(rng)}}}
		case 5:
			kind = "raw"
			raws := []string{`{"choices": [{"message": {"content": "hi"}}], "usage": {"n": 30.0}}`, `"a raw string"`,
				`[{"result": "a"}, "b"]`, `{"content": [{"type": "text", "text": "c"}], "model": "m"}`, `{"output": [{"type": "message", "content": [{"type": "output_text", "text": "o"}]}]}`}
			req.Input = &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
				Response: &historyv1.AssistantResponseInput_RawResponseJson{RawResponseJson: raws[rng.Intn(len(raws))]}}}
		case 6:
			kind = "request"
			req.Input = &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f", ArgumentsJson: `{"x": ` + randomJSON(rng, 2) + `}`}}
		case 7:
			if len(requests) == 0 {
				continue
			}
			kind = "output"
			out := randomJSON(rng, 2)
			ao := &historyv1.ActionOutputInput{ActionRequestId: requests[rng.Intn(len(requests))], OutputJson: &out}
			if rng.Intn(4) == 0 {
				e := "boom " + randomText(rng)
				ao.Error = &e
			}
			req.Input = &historyv1.AddMessageRequest_ActionOutput{ActionOutput: ao}
		case 8:
			if len(requests) == 0 {
				continue
			}
			// Re-add a request: it moves to the end of collections, keeps its index.
			kind = "readd-request"
			req.TargetId = requests[rng.Intn(len(requests))]
			req.Input = &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "g", ArgumentsJson: `{}`}}
		}
		resp, err := f.c.AddMessage(ctx, req)
		if status.Code(err) == codes.InvalidArgument {
			continue
		}
		if err != nil {
			t.Fatalf("AddMessage(%s): %v", kind, err)
		}
		accepted++
		switch kind {
		case "instruction":
			instructions = append(instructions, resp.GetMessage().GetId())
		case "request":
			requests = append(requests, resp.GetMessage().GetId())
		}
	}
	if accepted == 0 {
		// Every draw was refused or skipped (seen once in about a thousand seeds in CI): one plain
		// instruction, so that no seed tests an empty history alone.
		req := &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "hi"}}}}
		if _, err := f.c.AddMessage(ctx, req); err != nil {
			t.Fatalf("AddMessage(plain instruction): %v", err)
		}
		accepted++
	}
	return accepted
}

// roundTripDiff exports b, imports the text into a new branch, exports that, and returns "" when
// the two agree as the property says, else the first difference.
func roundTripDiff(t *testing.T, f *historyFixture, b string) string {
	ctx := testContext(t)
	modes := []historyv1.SerializationMode{historyv1.SerializationMode_SERIALIZATION_MODE_JSON,
		historyv1.SerializationMode_SERIALIZATION_MODE_PYTHON, historyv1.SerializationMode_SERIALIZATION_MODE_DB}
	first, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b, Mode: modes[0]})
	if err != nil {
		return fmt.Sprintf("ExportBranch: %v", err)
	}
	imp, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: first.GetData(), NewBranchId: true})
	if err != nil {
		return fmt.Sprintf("ImportBranch of the export: %v\n%s", err, first.GetData())
	}
	nb := imp.GetBranch().GetId()
	for _, mode := range modes {
		a, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b, Mode: mode})
		if err != nil {
			return err.Error()
		}
		c, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: nb, Mode: mode})
		if err != nil {
			return err.Error()
		}
		av, _ := jsonv.ParseString(a.GetData())
		cv, _ := jsonv.ParseString(c.GetData())
		if id, _ := get(cv, "id").Str(); id != nb {
			return fmt.Sprintf("%v: the re-export's id is %s, want %s", mode, id, nb)
		}
		av, cv = av.Delete("id").Delete("created_at"), cv.Delete("id").Delete("created_at")
		if !jsonv.Equal(av, cv) {
			return fmt.Sprintf("%v: export, import, export differs:\n first  %s\n second %s", mode, av, cv)
		}
	}
	chatA, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	if err != nil {
		return err.Error()
	}
	chatB, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: nb})
	if err != nil {
		return err.Error()
	}
	if !proto.Equal(&historyv1.ToChatMessagesResponse{Messages: chatA.GetMessages(), MessageIds: chatA.GetMessageIds(), RenderErrors: chatA.GetRenderErrors()},
		&historyv1.ToChatMessagesResponse{Messages: chatB.GetMessages(), MessageIds: chatB.GetMessageIds(), RenderErrors: chatB.GetRenderErrors()}) {
		return fmt.Sprintf("ToChatMessages differs:\n %v\n %v", chatA, chatB)
	}
	la, lb := listAll(t, f, b), listAll(t, f, nb)
	if len(la) != len(lb) {
		return fmt.Sprintf("%d messages, then %d", len(la), len(lb))
	}
	for i := range la {
		if la[i].GetId() != lb[i].GetId() || !proto.Equal(la[i].GetRendered(), lb[i].GetRendered()) {
			return fmt.Sprintf("message %d rendered differs:\n %v\n %v", i, la[i], lb[i])
		}
	}
	return ""
}

func listAll(t *testing.T, f *historyFixture, b string) []*historyv1.Message {
	var out []*historyv1.Message
	req := &historyv1.ListMessagesRequest{BranchId: b}
	for {
		resp, err := f.c.ListMessages(testContext(t), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetMessages()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return out
		}
	}
}
