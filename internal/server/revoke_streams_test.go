package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection/grpc_reflection_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// The tests here hold revocation to its rule for streams whose handlers do not watch their context
// (ADR-0009, "Revocation cuts streams": every open stream whose credentials are no longer valid
// "ends with UNAUTHENTICATED, reason ERROR_REASON_TOKEN_REVOKED"): a handler blocked in Recv
// (AppendMessages, reflection) or sending a replay (WatchBranch) must end as promptly as one that
// selects on ctx.Done(), and must apply nothing it reads and send nothing more after the revocation.

const otherToken = "other-token-0123456789abcdef"

// wantRevokedErr checks that err is UNAUTHENTICATED, reason TOKEN_REVOKED, with credential and why.
func wantRevokedErr(t *testing.T, err error, credential, why string) {
	t.Helper()
	ei := wantStatusInfo(t, err, codes.Unauthenticated, historyv1.ErrorReason_ERROR_REASON_TOKEN_REVOKED)
	if md := ei.GetMetadata(); md["credential"] != credential || md["why"] != why {
		t.Errorf("ErrorInfo metadata %v, want credential %s, why %s", md, credential, why)
	}
}

// appendAfterRevocation sends items on stream after its credentials were revoked and reads it to
// its end: no item may be answered, and the stream must end revoked.
func appendAfterRevocation(t *testing.T, stream historyv1.HistoryService_AppendMessagesClient, branch, credential, why string) {
	t.Helper()
	for range 3 {
		// A send may fail once the server has ended the stream (io.EOF): the end is read below.
		if err := stream.Send(&historyv1.AppendMessagesRequest{Item: instructionReq(branch, "after revocation")}); err != nil {
			break
		}
	}
	_ = stream.CloseSend() // a stream that is not cut ends OK after the items, rather than hang
	for {
		r, err := stream.Recv()
		if err != nil {
			wantRevokedErr(t, err, credential, why)
			return
		}
		t.Errorf("an item sent after revocation was answered: %v", r)
	}
}

// wantMessages checks that branch holds n messages in st.
func wantMessages(t *testing.T, st *store.Memory, branch string, n int) {
	t.Helper()
	info, err := st.GetBranch(context.Background(), mustUUID(t, branch))
	if err != nil {
		t.Fatal(err)
	}
	if info.MessageCount != n {
		t.Errorf("the branch holds %d messages, want %d: an item read after revocation was written", info.MessageCount, n)
	}
}

// openAppend creates a branch, opens an AppendMessages stream and writes one item on it.
func openAppend(t *testing.T, ctx context.Context, c historyv1.HistoryServiceClient) (historyv1.HistoryService_AppendMessagesClient, string) {
	t.Helper()
	cr, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	branch := cr.GetBranch().GetId()
	stream, err := c.AppendMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&historyv1.AppendMessagesRequest{Item: instructionReq(branch, "before")}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetError() != nil {
		t.Fatalf("the item before revocation: %v, %v", r, err)
	}
	return stream, branch
}

// TestRevokedTokenEndsAppendStream: ADR-0009, "Revocation cuts streams": an AppendMessages stream
// whose token is revoked "ends with UNAUTHENTICATED, reason ERROR_REASON_TOKEN_REVOKED", although
// its handler waits in Recv, not on its context; no item read after the revocation is written.
func TestRevokedTokenEndsAppendStream(t *testing.T) {
	tokens := mustTokens(t, testToken, otherToken)
	f := newAppendFixture(t, nil, WithAuthTokens(tokens))
	stream, branch := openAppend(t, withToken(testContext(t), testToken), f.c)

	if err := tokens.replace([]string{otherToken}); err != nil { // as Tokens.Load does after SIGHUP
		t.Fatal(err)
	}
	appendAfterRevocation(t, stream, branch, "bearerToken", "removed")
	wantMessages(t, f.st, branch, 1)
	eventually(t, "the revoked stream unregistered", func() bool { return f.ts.streams.count() == 0 })
}

// TestUntrustedCertificateEndsAppendStream: ADR-0009, "Revocation cuts streams", for a client
// certificate: once the client CA that issued it is retired, an AppendMessages stream ends
// UNAUTHENTICATED, TOKEN_REVOKED (clientCertificate, untrusted), and writes nothing more.
func TestUntrustedCertificateEndsAppendStream(t *testing.T) {
	first, second := newTestCA(t, "first CA"), newTestCA(t, "second CA")
	st := store.NewMemory()
	ts, id, caPath := mutualTLSServer(t, first, func(gs *grpc.Server) {
		historyv1.RegisterHistoryServiceServer(gs, NewHistoryServer(st, zap.NewNop()))
	})
	now := time.Now()
	cert, key := first.issue(t, "client", false, now.Add(-time.Hour), now.Add(time.Hour))
	c := historyv1.NewHistoryServiceClient(ts.dial(t, clientTLS(t, first, cert, key)))
	stream, branch := openAppend(t, testContext(t), c)

	writeFile(t, caPath, second.pem) // the first CA is retired
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	appendAfterRevocation(t, stream, branch, "clientCertificate", "untrusted")
	wantMessages(t, st, branch, 1)
}

// TestRevokedTokenEndsReflectionStream: ADR-0009, "Revocation cuts streams", for the reflection
// stream (bidirectional, its handler waits in Recv): it answers nothing after the revocation and
// ends UNAUTHENTICATED, TOKEN_REVOKED.
func TestRevokedTokenEndsReflectionStream(t *testing.T) {
	tokens := mustTokens(t, testToken, otherToken)
	ts := newTestServer(t, nil, WithAuthTokens(tokens))
	st, err := grpc_reflection_v1.NewServerReflectionClient(ts.conn).ServerReflectionInfo(withToken(testContext(t), testToken))
	if err != nil {
		t.Fatal(err)
	}
	req := &grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{ListServices: "*"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}

	if err := tokens.replace([]string{otherToken}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err == nil {
		t.Fatalf("reflection answered after revocation: %v", resp)
	}
	wantRevokedErr(t, err, "bearerToken", "removed")
}

// TestRevokedTokenEndsWatchReplay: ADR-0009, "Revocation cuts streams", during a WatchBranch
// replay: the replay sends frame after frame without waiting on anything, and must stop at the
// revocation; only the frames already handed to the transport (bounded by HTTP/2 flow control)
// may still arrive, never the rest of the history.
func TestRevokedTokenEndsWatchReplay(t *testing.T) {
	tokens := mustTokens(t, testToken, otherToken)
	f := newAppendFixture(t, nil, WithAuthTokens(tokens))
	ctx := withToken(testContext(t), testToken)
	cr, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	branch := cr.GetBranch().GetId()
	// Frames of about 16 KiB: the flow-control windows (64 KiB a stream on this client, which
	// fixes them and so turns off BDP growth; 64 KiB of write quota on the server) hold a handful.
	const messages = 200
	text := strings.Repeat("history the revoked client must not read ", 400)
	reqs := make([]*historyv1.AddMessageRequest, messages)
	for i := range reqs {
		reqs[i] = instructionReq(branch, text)
	}
	if _, err := pipelineErr(ctx, f.c, 64, reqs); err != nil {
		t.Fatal(err)
	}
	conn := f.ts.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	zero := uint64(0)
	w, err := historyv1.NewHistoryServiceClient(conn).WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the start frame: the replay is under way
		t.Fatal(err)
	}

	if err := tokens.replace([]string{otherToken}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err = w.Recv(); err != nil {
			break
		}
		n++
	}
	wantRevokedErr(t, err, "bearerToken", "removed")
	t.Logf("%d frames arrived after the revocation", n)
	if n > 16 {
		t.Errorf("the revoked stream received %d frames after the revocation, of %d: the replay went on", n, messages+1)
	}
}
