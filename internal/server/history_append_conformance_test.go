package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/vectors"
)

// Issue 21 Acceptance: "The append stream passes a conformance test that sends every storetest
// AddMessage case through it and compares results with the unary call's." The AddMessage cases
// that reach the server are the issue 4 scenario records (the gRPC replay of
// TestHistoryConformanceOverGRPC) and the store's own cases (storetest: kinds, sequences,
// idempotency), written here as requests in appendCases. Each is run twice on fresh servers, once
// with unary AddMessage and once with every AddMessage sent as an item of an AppendMessages
// stream, and every AddMessage's answer (response or status) must be the same, ids and times
// aside.

// viaAppendStream is a client interceptor that sends every AddMessage as the one item of an
// AppendMessages stream and returns the item's answer as the unary call would.
func viaAppendStream(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != historyv1.HistoryService_AddMessage_FullMethodName {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	resp, err := appendOne(ctx, historyv1.NewHistoryServiceClient(cc), req.(*historyv1.AddMessageRequest))
	if err != nil {
		return err
	}
	proto.Merge(reply.(*historyv1.AddMessageResponse), resp)
	return nil
}

// appendOne sends req as the only item of a new stream, and returns its answer.
func appendOne(ctx context.Context, c historyv1.HistoryServiceClient, req *historyv1.AddMessageRequest) (*historyv1.AddMessageResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.AppendMessages(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&historyv1.AppendMessagesRequest{Item: req}); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	out, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("AppendMessages ended before the item's answer: %w", err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("AppendMessages after its one answer: %v, want the end (OK)", err)
	}
	return itemAnswer(out)
}

// itemAnswer is an item's answer as a unary call's: the response, or the status as an error.
func itemAnswer(out *historyv1.AppendMessagesResponse) (*historyv1.AddMessageResponse, error) {
	if e := out.GetError(); e != nil {
		return nil, status.FromProto(&spb.Status{Code: e.GetCode(), Message: e.GetMessage(), Details: e.GetDetails()}).Err()
	}
	return out.GetResponse(), nil
}

// addTranscript records every AddMessage's answer, normalised by normalizeAnswer.
type addTranscript struct {
	mu      sync.Mutex
	answers []string
}

func (tr *addTranscript) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if method == historyv1.HistoryService_AddMessage_FullMethodName {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if err != nil {
			st := status.Convert(err)
			b, _ := protojson.Marshal(st.Proto())
			tr.answers = append(tr.answers, "error "+string(b))
		} else {
			b, _ := protojson.Marshal(reply.(proto.Message))
			tr.answers = append(tr.answers, "ok "+string(b))
		}
	}
	return err
}

var (
	uuidText      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	createdAtJSON = regexp.MustCompile(`"createdAt":\s*[0-9.e+-]+`)
	systemTime    = regexp.MustCompile(`System Time: [0-9T:+-]+`)
)

// normalizeAnswers replaces the ids of a transcript by their order of first appearance (the two
// servers mint different ones) and the creation times (which differ by the run's duration).
func normalizeAnswers(answers []string) []string {
	ids := map[string]string{}
	out := make([]string, len(answers))
	for i, a := range answers {
		a = uuidText.ReplaceAllStringFunc(a, func(id string) string {
			if _, ok := ids[id]; !ok {
				ids[id] = fmt.Sprintf("<id%d>", len(ids))
			}
			return ids[id]
		})
		a = createdAtJSON.ReplaceAllString(a, `"createdAt":<t>`)
		out[i] = systemTime.ReplaceAllString(a, "System Time: <t>")
	}
	return out
}

// replayWith replays r on a fresh server whose client sends AddMessage unary or, with stream, as
// AppendMessages items; it returns the replay's steps and the AddMessage transcript.
func replayWith(t *testing.T, r vectors.Record, stream bool) (jsonv.Value, []string) {
	t.Helper()
	f := newHistoryFixture(t)
	tr := &addTranscript{}
	chain := []grpc.UnaryClientInterceptor{tr.interceptor}
	if stream {
		chain = append(chain, viaAppendStream)
	}
	f.c = historyv1.NewHistoryServiceClient(f.ts.dial(t, grpc.WithChainUnaryInterceptor(chain...)))
	got := (&grpcInterp{t: t, f: f, vars: map[string]any{}}).replay(r)
	return got, normalizeAnswers(tr.answers)
}

// TestAppendConformanceRecords: issue 21 Acceptance over the issue 4 records that add messages.
func TestAppendConformanceRecords(t *testing.T) {
	adds, records, withAdds := 0, 0, 0
	for _, r := range vectors.ForTest(t) {
		if !map[string]bool{"manager": true, "hooks": true, "branch": true, "progression": true, "pile": true}[r.Group] {
			continue
		}
		if _, ok := grpcReason(r); ok {
			continue
		}
		records++
		t.Run(fmt.Sprintf("L%03d_%s", r.Line, r.Name), func(t *testing.T) {
			unaryGot, unary := replayWith(t, r, false)
			streamGot, streamed := replayWith(t, r, true)
			if len(unary) == 0 {
				return // nothing to compare: the record adds no message over gRPC
			}
			withAdds++
			if len(streamed) != len(unary) {
				t.Fatalf("%d AddMessage answers over the stream, %d unary", len(streamed), len(unary))
			}
			for i := range unary {
				if streamed[i] != unary[i] {
					t.Errorf("AddMessage #%d:\n stream %s\n unary  %s", i, streamed[i], unary[i])
				}
			}
			if a, b := normalizeAnswers([]string{streamGot.String()}), normalizeAnswers([]string{unaryGot.String()}); a[0] != b[0] {
				t.Errorf("the replays differ:\n stream %s\n unary  %s", a[0], b[0])
			}
			adds += len(unary)
		})
	}
	t.Logf("%d records replayed, %d of them add messages: %d AddMessage answers compared", records, withAdds, adds)
	if withAdds == 0 {
		t.Fatal("no record adds a message")
	}
}
