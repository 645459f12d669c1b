package server

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// newBoundedFixture is a history fixture whose server has the given response budget, render cap
// and import limit, scaled down so that small messages cross them.
func newBoundedFixture(t *testing.T, response, rendered, imp int) *historyFixture {
	t.Helper()
	st := store.NewMemory()
	ts := newTestServer(t, func(gs *grpc.Server) {
		hs := NewHistoryServer(st, zap.NewNop())
		hs.setBounds(response, rendered, imp)
		historyv1.RegisterHistoryServiceServer(gs, hs)
	})
	return &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
}

// deepContextJSON is a context item nested depth lists deep around n ones: issue 11 case 1's
// shape, whose minimal YAML is about 2*depth bytes per item.
func deepContextJSON(depth, n int) string {
	return strings.Repeat("[", depth) + strings.TrimSuffix(strings.Repeat("1,", n), ",") + strings.Repeat("]", depth)
}

// TestRegisterHistoryTakesLimits: the byte bounds come from the Server's Limits (WithLimits), and
// the response budget also bounds WatchBranch frames (issue 11: FRAME_TOO_LARGE takes the flag).
func TestRegisterHistoryTakesLimits(t *testing.T) {
	l := DefaultLimits()
	l.MaxResponseBytes, l.MaxRenderedBytes, l.MaxImportBytes = 2<<20, 512<<10, 8<<20
	srv := New(nil, WithLimits(l))
	t.Cleanup(srv.GRPCServer().Stop) // its stream workers
	hs := RegisterHistory(srv, store.NewMemory())
	if hs.maxResponse != 2<<20 || hs.maxFrame != 2<<20 || hs.maxRendered != 512<<10 || hs.maxImport != 8<<20 || hs.frames[1].maxRendered != 512<<10 {
		t.Errorf("bounds %d %d %d %d %d, want the Limits'", hs.maxResponse, hs.maxFrame, hs.maxRendered, hs.maxImport, hs.frames[1].maxRendered)
	}
	srv = New(nil)
	t.Cleanup(srv.GRPCServer().Stop)
	hs = RegisterHistory(srv, store.NewMemory())
	if hs.maxResponse != DefaultMaxResponseBytes || hs.maxRendered != DefaultMaxRenderedBytes || hs.maxImport != DefaultMaxImportBytes {
		t.Errorf("default bounds %d %d %d", hs.maxResponse, hs.maxRendered, hs.maxImport)
	}
	bad := DefaultLimits()
	bad.MaxRenderedBytes = bad.MaxResponseBytes + 1
	if err := bad.Validate(); err == nil {
		t.Error("a render cap above the response budget validated")
	}
}

// issue 11 case 1: a read renders a deeply nested context only up to --max-rendered-bytes: the
// message comes back with a render error naming the cap; ToChatMessages fails naming the message;
// omit_rendered and ExportBranch do not render at all.
func TestHistoryRenderCap(t *testing.T) {
	const rendered = 16 << 10
	f := newBoundedFixture(t, 1<<20, rendered, 1<<20)
	ctx := testContext(t)
	b := f.create(t, nil)
	// ~40 KB of JSON that renders to ~40 MB: the write does not render it (no include_rendered).
	w := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "deep"}, ContextJson: []string{deepContextJSON(990, 20_000)},
	}}})
	id := w.GetMessage().GetId()
	if w.GetMessage().GetRendered() != nil {
		t.Fatalf("a write without include_rendered rendered")
	}
	small := f.instruction(t, b, "small").GetId()

	checkCapped := func(what string, m *historyv1.Message) {
		t.Helper()
		r := m.GetRendered()
		if r.GetText() != "" || r.GetParts() != nil || !strings.Contains(r.GetRenderError(), strconv.Itoa(rendered)) ||
			!strings.Contains(r.GetRenderError(), "--max-rendered-bytes") {
			t.Errorf("%s: rendered = %v, want only a render error naming the cap", what, r)
		}
	}
	gm, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	checkCapped("GetMessage", gm.GetMessage())
	if gm.GetMessage().GetInstruction().GetPromptContextJson()[0] == "" {
		t.Error("the content was lost with the rendering")
	}
	lm, err := f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: b})
	if err != nil || lm.GetMessage().GetRendered().GetText() != "Instruction: small" {
		t.Fatalf("GetLastMessage: %v, %v", lm, err)
	}
	page, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b})
	if err != nil || len(page.GetMessages()) != 2 {
		t.Fatalf("ListMessages: %v, %v", page, err)
	}
	checkCapped("ListMessages", page.GetMessages()[0])
	if page.GetMessages()[1].GetRendered().GetText() != "Instruction: small" {
		t.Errorf("the other message: %v", page.GetMessages()[1].GetRendered())
	}
	omit, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: id, OmitRendered: true})
	if err != nil || omit.GetMessage().GetRendered() != nil {
		t.Fatalf("omit_rendered: %v, %v", omit.GetMessage().GetRendered(), err)
	}
	omitList, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b, OmitRendered: true})
	if err != nil || omitList.GetMessages()[1].GetRendered() != nil {
		t.Fatalf("ListMessages omit_rendered: %v", err)
	}
	omitLast, err := f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: b, OmitRendered: true})
	if err != nil || omitLast.GetMessage().GetRendered() != nil {
		t.Fatalf("GetLastMessage omit_rendered: %v", err)
	}

	_, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	ei, _ := wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RENDER_TOO_LARGE)
	md := ei.GetMetadata()
	if n, _ := strconv.Atoi(md["renderedBytes"]); md["messageId"] != id || md["branchId"] != b || md["maxRenderedBytes"] != strconv.Itoa(rendered) ||
		md["flag"] != "--max-rendered-bytes" || n > rendered || n < rendered-4096 {
		t.Errorf("metadata %v: want the message, the cap and a stop at it, never past", md)
	}
	// Without the message, the projection works.
	chat, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: []string{small}}})
	if err != nil || len(chat.GetMessages()) != 1 || chat.GetMessages()[0].GetText() != "Instruction: small" {
		t.Fatalf("ToChatMessages without it: %v, %v", chat, err)
	}
	// A write that asks for its rendering gets the render error, and its write stands.
	w2 := f.add(t, &historyv1.AddMessageRequest{BranchId: b, IncludeRendered: true, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		ContextJson: []string{deepContextJSON(990, 20_000)},
	}}})
	checkCapped("AddMessage include_rendered", w2.GetMessage())
	if _, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b}); err != nil {
		t.Errorf("ExportBranch (which does not render): %v", err)
	}
}

// issue 11 case 2: ListMessages and ListBranches pages are cut short to fit the response budget
// (next_page_token continues); a message, chat projection or export that alone does not fit is
// RESOURCE_EXHAUSTED with figures and the flag.
func TestHistoryResponseBudget(t *testing.T) {
	const budget = 64 << 10
	f := newBoundedFixture(t, budget, 48<<10, 1<<20)
	ctx := testContext(t)
	b := f.create(t, nil)
	var want []string
	for i := range 12 {
		want = append(want, f.instruction(t, b, strconv.Itoa(i)+strings.Repeat("x", 10<<10)).GetId())
	}
	var got []string
	req := &historyv1.ListMessagesRequest{BranchId: b, PageSize: 1000}
	pages := 0
	for {
		resp, err := f.c.ListMessages(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if n := proto.Size(resp); n > budget {
			t.Fatalf("a page of %d bytes, over the budget %d", n, budget)
		}
		pages++
		for _, m := range resp.GetMessages() {
			got = append(got, m.GetId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	// 12 messages of ~20 KB each (content and rendering): three fit in 64 KiB.
	if strings.Join(got, ",") != strings.Join(want, ",") || pages < 4 {
		t.Fatalf("listed %d messages in %d pages, want the 12 in order over at least 4", len(got), pages)
	}
	// Descending, the same cut.
	if ids := f.ids(t, b, &historyv1.ListMessagesRequest{PageSize: 1000, Descending: true}); len(ids) != 12 || ids[0] != want[11] {
		t.Fatalf("descending: %d ids", len(ids))
	}

	big := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(strings.Repeat("y", 40<<10))}).GetMessage().GetId()
	checkTooLarge := func(what string, err error, keys ...string) {
		t.Helper()
		ei, _ := wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE)
		md := ei.GetMetadata()
		if n, _ := strconv.Atoi(md["responseBytes"]); n <= budget || md["maxResponseBytes"] != strconv.Itoa(budget) || md["flag"] != "--max-response-bytes" {
			t.Errorf("%s: metadata %v, want the size over the budget and the flag", what, md)
		}
		for _, k := range keys {
			if md[k] == "" {
				t.Errorf("%s: metadata %v has no %s", what, md, k)
			}
		}
	}
	_, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: big})
	checkTooLarge("GetMessage", err, "messageId", "branchId")
	if resp, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: big, OmitRendered: true}); err != nil || resp.GetMessage().GetId() != big {
		t.Errorf("GetMessage with omit_rendered: %v", err)
	}
	_, err = f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: b})
	checkTooLarge("GetLastMessage", err, "messageId")
	_, err = f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b, PageSize: 1, Descending: true})
	checkTooLarge("ListMessages of one that does not fit", err, "messageId")
	_, err = f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
	checkTooLarge("ToChatMessages", err, "branchId")
	_, err = f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b})
	checkTooLarge("ExportBranch", err, "branchId")

	// ListBranches: branches with 20 KB of metadata each, listed in pages that fit.
	var meta strings.Builder
	meta.WriteString(`{"pad":"` + strings.Repeat("m", 20<<10) + `"}`)
	for range 6 {
		f.create(t, &historyv1.CreateBranchRequest{Metadata: mustStruct(t, meta.String())})
	}
	var branches int
	lreq := &historyv1.ListBranchesRequest{PageSize: 1000}
	for {
		resp, err := f.c.ListBranches(ctx, lreq)
		if err != nil {
			t.Fatal(err)
		}
		if proto.Size(resp) > budget {
			t.Fatalf("a ListBranches page over the budget")
		}
		branches += len(resp.GetBranches())
		if resp.GetNextPageToken() == "" {
			break
		}
		lreq.PageToken = resp.GetNextPageToken()
	}
	if branches != 7 {
		t.Errorf("listed %d branches, want 7", branches)
	}
}

// issue 11: a branch larger than the budget is still read and written whole through
// ExportBranchStream (the same text as ExportBranch, in chunks) and ImportBranchStream.
func TestHistoryExportImportStream(t *testing.T) {
	const budget = 64 << 10
	f := newBoundedFixture(t, budget, 16<<10, 1<<20)
	ctx := testContext(t)
	b := f.create(t, nil)
	for i := range 20 {
		f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(strconv.Itoa(i) + strings.Repeat("é", 5<<10))})
	}
	exp, err := f.st.ExportBranch(ctx, mustUUID(t, b), store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatal(err)
	}
	want := jsonv.Marshal(exp.Data)
	if len(want) <= budget {
		t.Fatalf("export of %d bytes does not cross the budget", len(want))
	}
	stream, err := f.c.ExportBranchStream(ctx, &historyv1.ExportBranchStreamRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	chunks := 0
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if proto.Size(resp) > budget || resp.GetHeadSequence() != exp.Head {
			t.Fatalf("chunk of %d bytes (head %d), want within %d (head %d)", proto.Size(resp), resp.GetHeadSequence(), budget, exp.Head)
		}
		got.Write(resp.GetData())
		chunks++
	}
	if !bytes.Equal(got.Bytes(), want) || chunks < 2 {
		t.Fatalf("streamed %d bytes in %d chunks, want the export's %d bytes in several", got.Len(), chunks, len(want))
	}

	imp := func(t *testing.T, first *historyv1.ImportBranchStreamRequest, data []byte) (*historyv1.ImportBranchStreamResponse, error) {
		t.Helper()
		up, err := f.c.ImportBranchStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const chunk = 10 << 10 // splits the two-byte é's
		first.Data = data[:min(chunk, len(data))]
		if err := up.Send(first); err != nil {
			t.Fatal(err)
		}
		for off := chunk; off < len(data); off += chunk {
			if err := up.Send(&historyv1.ImportBranchStreamRequest{Data: data[off:min(off+chunk, len(data))]}); err != nil {
				break // the server ended the call; CloseAndRecv reports why
			}
		}
		return up.CloseAndRecv()
	}
	resp, err := imp(t, &historyv1.ImportBranchStreamRequest{NewBranchId: true, RequestId: "imp-1"}, want)
	if err != nil {
		t.Fatal(err)
	}
	nb := resp.GetBranch().GetId()
	if nb == b || resp.GetBranch().GetMessageCount() != 20 {
		t.Fatalf("imported %v", resp.GetBranch())
	}
	if a, c := f.ids(t, b, nil), f.ids(t, nb, nil); strings.Join(a, ",") != strings.Join(c, ",") {
		t.Errorf("the imported branch's messages differ from the exported one's")
	}
	// A repeat of the request id answers from the first call.
	again, err := imp(t, &historyv1.ImportBranchStreamRequest{NewBranchId: true, RequestId: "imp-1"}, want)
	if err != nil || again.GetBranch().GetId() != nb {
		t.Errorf("repeat: %v, %v", again.GetBranch().GetId(), err)
	}
	// Options after the first message are refused.
	up, _ := f.c.ImportBranchStream(ctx)
	_ = up.Send(&historyv1.ImportBranchStreamRequest{NewBranchId: true, Data: []byte("[")})
	_ = up.Send(&historyv1.ImportBranchStreamRequest{BranchId: b, Data: []byte("]")})
	_, err = up.CloseAndRecv()
	wantField(t, err, "request_id")

	// Past the import limit: refused with figures, nothing written.
	small := newBoundedFixture(t, budget, 16<<10, 32<<10)
	_, err = imp2(t, small, want)
	ei, _ := wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_IMPORT_TOO_LARGE)
	if md := ei.GetMetadata(); md["maxImportBytes"] != strconv.Itoa(32<<10) || md["flag"] != "--max-import-bytes" || md["importBytes"] == "" {
		t.Errorf("metadata %v", md)
	}
	if page, err := small.c.ListBranches(ctx, &historyv1.ListBranchesRequest{}); err != nil || len(page.GetBranches()) != 0 {
		t.Errorf("a refused import wrote %v (%v)", page.GetBranches(), err)
	}
}

// imp2 streams data to f's ImportBranchStream in 10 KiB chunks.
func imp2(t *testing.T, f *historyFixture, data []byte) (*historyv1.ImportBranchStreamResponse, error) {
	t.Helper()
	up, err := f.c.ImportBranchStream(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 10 << 10 {
		if err := up.Send(&historyv1.ImportBranchStreamRequest{NewBranchId: off == 0, Data: data[off:min(off+10<<10, len(data))]}); err != nil {
			break
		}
	}
	return up.CloseAndRecv()
}

func mustUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustStruct(t *testing.T, text string) *structpb.Struct {
	t.Helper()
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(text), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}
