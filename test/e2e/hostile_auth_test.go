//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 11's hostile cases 4 and 5 and the connection and in-flight bounds
// (docs/decisions/0009-auth-before-bytes-and-revocation.md), against the real binary.

const (
	authToken = "hostile-auth-token-0123456789abcdef"
	keptToken = "hostile-kept-token-0123456789abcdef"
	// rssSlack is issue 11's acceptance bound for case 4: "unauthenticated floods ... at most 100 MB
	// above the idle server's RSS".
	rssSlack = 100 << 20
	// defaultMaxRecv is historyd's default --max-recv-msg-size (4 MiB).
	defaultMaxRecv = 4 << 20
)

// importBody is an ImportBranchRequest of about size bytes (its data field a run of 'x', not JSON),
// encoded once and sent as it is by every call of a flood (rawCodec), so the flood costs the test
// process one buffer, not one per call.
func importBody(size int) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), strings.Repeat("x", size-16))
}

// flood makes conns connections and, on each, perConn concurrent ImportBranch calls of body with
// ctx's metadata, and returns each call's error (nil for a success).
func flood(t *testing.T, p *proc, ctx context.Context, conns, perConn int, body []byte) []error {
	t.Helper()
	errs := make([]error, conns*perConn)
	var wg sync.WaitGroup
	for c := range conns {
		conn := dial(t, p) // a connection of its own each
		for i := range perConn {
			wg.Go(func() {
				var resp []byte
				req := body
				errs[c*perConn+i] = conn.Invoke(ctx, historyv1.HistoryService_ImportBranch_FullMethodName, &req, &resp, grpc.ForceCodec(rawCodec{}))
			})
		}
	}
	wg.Wait()
	return errs
}

// errorInfoOf returns err's ErrorInfo, or nil.
func errorInfoOf(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// TestHostileUnauthenticatedFlood: issue 11 case 4: "10 connections x 100 concurrent 4 MiB
// ImportBranch with no token took RSS to 5.18 GB ... every call answered UNAUTHENTICATED". Now
// every call is refused from its headers, before its body is read: each is UNAUTHENTICATED
// (reason UNAUTHENTICATED) and peak RSS stays within 100 MB of the idle server's.
func TestHostileUnauthenticatedFlood(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokens(t, filepath.Join(dir, "tokens"), authToken)
	p := startServer(t, "--auth-tokens-file", tokens)
	resetPeak(t, p)
	idle := procMem(t, p)

	conns, perConn := hostileSize(10, 4), hostileSize(100, 50)
	body := importBody(defaultMaxRecv - 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errs := flood(t, p, ctx, conns, perConn, body)
	unauth := 0
	for _, err := range errs {
		if status.Code(err) == codes.Unauthenticated && reasonOf(err) == historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED.String() {
			unauth++
		} else if unauth == 0 {
			t.Errorf("a call without a token: %v, want UNAUTHENTICATED (reason UNAUTHENTICATED)", err)
		}
	}
	if unauth != len(errs) {
		t.Errorf("%d of %d calls UNAUTHENTICATED, want all", unauth, len(errs))
	}
	t.Logf("%d connections x %d calls of %d bytes without a token: %d UNAUTHENTICATED", conns, perConn, len(body), unauth)
	assertPeakWithin(t, p, idle, rssSlack, "unauthenticated flood")

	// The server is fine: health answers, and a call with the token works.
	if _, err := healthpb.NewHealthClient(dial(t, p)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health after the flood: %v", err)
	}
	if _, err := historyv1.NewHistoryServiceClient(dial(t, p)).ListBranches(withToken(ctx, authToken), &historyv1.ListBranchesRequest{}); err != nil {
		t.Errorf("a call with the token after the flood: %v", err)
	}
}

// TestHostileInflightBudget: issue 11 "an in-flight request budget (--max-inflight-bytes) that
// fails fast: each unary call reserves --max-recv-msg-size when it starts ... and gets
// RESOURCE_EXHAUSTED when the reservation does not fit". An authenticated flood of large requests
// against a small budget: the calls that do not fit are RESOURCE_EXHAUSTED (reason
// INFLIGHT_BUDGET_EXCEEDED) with the figures and the flag, peak RSS stays within the budget's reach,
// every reservation is given back, and the server serves on.
func TestHostileInflightBudget(t *testing.T) {
	const budget = 8 * defaultMaxRecv // 32 MiB: eight calls at once
	dir := t.TempDir()
	tokens := writeTokens(t, filepath.Join(dir, "tokens"), authToken)
	p := startServer(t, "--auth-tokens-file", tokens, "--max-inflight-bytes", "32MiB", "--metrics-addr", "127.0.0.1:0")
	metrics := logAddress(t, p, "serving metrics")
	resetPeak(t, p)
	idle := procMem(t, p)

	conns, perConn := hostileSize(10, 4), hostileSize(100, 25)
	ctx, cancel := context.WithTimeout(withToken(context.Background(), authToken), 5*time.Minute)
	defer cancel()
	errs := flood(t, p, ctx, conns, perConn, importBody(defaultMaxRecv-1024))
	refused, other := 0, map[codes.Code]int{}
	for _, err := range errs {
		ei := errorInfoOf(err)
		if status.Code(err) != codes.ResourceExhausted || ei.GetReason() != historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED.String() {
			other[status.Code(err)]++
			continue
		}
		refused++
		md := ei.GetMetadata()
		if md["budgetBytes"] != fmt.Sprint(budget) || md["requestBytes"] != fmt.Sprint(defaultMaxRecv) ||
			md["flag"] != "--max-inflight-bytes" || md["reservedBytes"] == "" {
			t.Errorf("ErrorInfo metadata %v, want the figures of the 32 MiB budget and the flag", md)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "--max-inflight-bytes") {
			t.Errorf("message %q does not name the flag", msg)
		}
	}
	t.Logf("%d authenticated calls of 4 MiB against a 32 MiB budget: %d INFLIGHT_BUDGET_EXCEEDED, others %v", len(errs), refused, other)
	if refused == 0 {
		t.Error("no call was refused by the in-flight budget")
	}
	if other[codes.InvalidArgument] == 0 {
		t.Error("no call went through to the handler (its data is not JSON: INVALID_ARGUMENT)")
	}
	// Each admitted call holds its 4 MiB request, decoded, and the handler's work on it: the peak
	// stays within twice the budget plus the slack, wherever the flood's size goes.
	assertPeakWithin(t, p, idle, 2*budget+rssSlack, "authenticated flood against the in-flight budget")

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, ok := scrape(t, metrics).get("historyd_inflight_request_bytes")
		if ok && v == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("historyd_inflight_request_bytes = %v after the flood, want 0: a reservation was not given back", v)
		}
	}
	if _, err := historyv1.NewHistoryServiceClient(dial(t, p)).ListBranches(ctx, &historyv1.ListBranchesRequest{}); err != nil {
		t.Errorf("a call after the flood: %v", err)
	}
}

// TestHostileConnectionCap: issue 11 "a connection cap (--max-connections)": with the cap reached,
// a further connection is closed at once (its call UNAVAILABLE, not hung), the open ones keep
// working, and a place freed is taken again.
func TestHostileConnectionCap(t *testing.T) {
	const capacity = 8
	p := startServer(t, "--max-connections", fmt.Sprint(capacity), "--metrics-addr", "127.0.0.1:0")
	metrics := logAddress(t, p, "serving metrics")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// waitServing's connection is still open (closed at the end of the test): one place is taken;
	// gRPC clients that made a call hold the others (a bare TCP connection would be closed after
	// the 10 s handshake timeout).
	var held []*grpc.ClientConn
	for range capacity - 1 {
		c := dial(t, p)
		if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// A flood of connections past the cap: each is closed by the server at once.
	for range hostileSize(1000, 100) {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(startTimeout))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, syscall.ETIMEDOUT) || isTimeout(err) {
			t.Fatalf("a connection past the cap: read %v, want it closed by the server", err)
		}
		c.Close()
	}
	callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()
	if _, err := healthpb.NewHealthClient(dial(t, p)).Check(callCtx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("a gRPC client past the cap: %v, want UNAVAILABLE", err)
	}
	s := scrape(t, metrics)
	if v, _ := s.get("historyd_connections_refused_total"); v < float64(hostileSize(1000, 100)) {
		t.Errorf("historyd_connections_refused_total = %v, want at least %d", v, hostileSize(1000, 100))
	}
	if v, _ := s.get("historyd_connections_open"); v != capacity {
		t.Errorf("historyd_connections_open = %v, want %d", v, capacity)
	}

	// A place freed is taken again: close one held connection and call on a new client until the
	// server has seen the close (it frees the place when its reader gets EOF).
	_ = held[0].Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c, cancelCall := context.WithTimeout(ctx, 5*time.Second)
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = healthpb.NewHealthClient(conn).Check(c, &healthpb.HealthCheckRequest{})
		cancelCall()
		if err == nil {
			t.Cleanup(func() { _ = conn.Close() })
			break
		}
		_ = conn.Close()
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no call got through after a place was freed: %v", err)
		}
	}
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// wantRevoked reads recv until it fails and checks that it ended UNAUTHENTICATED, reason
// TOKEN_REVOKED, with the credential and why given.
func wantRevoked(t *testing.T, what string, recv func() error, credential, why string) {
	t.Helper()
	var err error
	for err == nil {
		err = recv()
	}
	ei := errorInfoOf(err)
	if status.Code(err) != codes.Unauthenticated || ei.GetReason() != historyv1.ErrorReason_ERROR_REASON_TOKEN_REVOKED.String() {
		t.Fatalf("%s ended %v, want UNAUTHENTICATED, reason TOKEN_REVOKED", what, err)
	}
	if md := ei.GetMetadata(); md["credential"] != credential || md["why"] != why {
		t.Errorf("%s: ErrorInfo metadata %v, want credential %s, why %s", what, md, credential, why)
	}
}

// TestHostileRevokedToken: issue 11 case 5: "After the tokens file was replaced and SIGHUP sent ...
// WatchBranch and SubscribeInbox streams opened with it kept delivering new commits and mail
// indefinitely". Now both end UNAUTHENTICATED (reason TOKEN_REVOKED) at the reload, and a stream
// opened with a token that stays valid keeps delivering.
func TestHostileRevokedToken(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokens(t, filepath.Join(dir, "tokens"), authToken, keptToken)
	p := startServer(t, "--auth-tokens-file", tokens)
	conn := dial(t, p)
	history, exchange := historyv1.NewHistoryServiceClient(conn), historyv1.NewExchangeServiceClient(conn)
	base, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	revokedCtx, keptCtx := withToken(base, authToken), withToken(base, keptToken)

	branch, err := history.CreateBranch(keptCtx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	branchID := branch.GetBranch().GetId()
	for _, o := range []string{ownerA, ownerB} {
		if _, err := exchange.Register(keptCtx, &historyv1.RegisterRequest{OwnerId: o}); err != nil {
			t.Fatal(err)
		}
	}
	watch := func(ctx context.Context) historyv1.HistoryService_WatchBranchClient {
		s, err := history.WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: branchID})
		if err != nil {
			t.Fatal(err)
		}
		if f, err := s.Recv(); err != nil || f.GetStart() == nil {
			t.Fatalf("WatchBranch first frame %v, %v; want start", f, err)
		}
		return s
	}
	revokedWatch, keptWatch := watch(revokedCtx), watch(keptCtx)
	inbox, err := exchange.SubscribeInbox(revokedCtx, &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := inbox.Recv(); err != nil || f.GetHeartbeat() == nil {
		t.Fatalf("SubscribeInbox first frame %v, %v; want a heartbeat", f, err)
	}

	skip := len(p.stderr.Lines())
	writeTokens(t, tokens, keptToken)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, skip, "SIGHUP: tokens file reloaded")
	wantRevoked(t, "WatchBranch with the revoked token", func() error { _, err := revokedWatch.Recv(); return err }, "bearerToken", "removed")
	wantRevoked(t, "SubscribeInbox with the revoked token", func() error { _, err := inbox.Recv(); return err }, "bearerToken", "removed")

	// The stream with the kept token delivers the next commit.
	if _, err := history.AddMessage(keptCtx, &historyv1.AddMessageRequest{
		BranchId: branchID,
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "after the reload"},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := keptWatch.Recv()
		if err != nil {
			t.Fatalf("the WatchBranch stream with the kept token: %v", err)
		}
		if f.GetCommit() != nil {
			break
		}
	}
	// And the revoked token opens nothing new.
	s, err := history.WatchBranch(revokedCtx, &historyv1.WatchBranchRequest{BranchId: branchID})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("WatchBranch with the revoked token after the reload: %v, want UNAUTHENTICATED", err)
	}
}

// TestHostileExpiringClientCertificate: issue 11: "likewise a TLS stream whose client certificate
// has expired": a WatchBranch stream over mutual TLS, opened with a certificate valid for a few
// more seconds, ends UNAUTHENTICATED (reason TOKEN_REVOKED, why expired) when it expires, while the
// server's other streams go on.
func TestHostileExpiringClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now()
	srvCert, srvKey := ca.issue(t, dir, "localhost", true, now.Add(-time.Hour), now.Add(time.Hour))
	goodCert, goodKey := ca.issue(t, dir, "client", false, now.Add(-time.Hour), now.Add(time.Hour))
	shortCert, shortKey := ca.issue(t, dir, "short-lived", false, now.Add(-time.Hour), now.Add(3*time.Second))
	caFile := ca.writePEM(t, dir)
	p := startProcess(t, "--listen", "127.0.0.1:0", "--log-format", "json",
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caFile)
	select {
	case p.addr = <-p.stderr.serving:
	case <-p.done:
		t.Fatalf("historyd exited: %v\n%s", p.err, strings.Join(p.stderr.Lines(), "\n"))
	case <-time.After(startTimeout):
		t.Fatal("no serving line")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	good := historyv1.NewHistoryServiceClient(dialTLS(t, p.addr, caFile, goodCert, goodKey))
	branch, err := good.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	watch := func(c historyv1.HistoryServiceClient) historyv1.HistoryService_WatchBranchClient {
		s, err := c.WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: branch.GetBranch().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if f, err := s.Recv(); err != nil || f.GetStart() == nil {
			t.Fatalf("WatchBranch first frame %v, %v; want start", f, err)
		}
		return s
	}
	short := watch(historyv1.NewHistoryServiceClient(dialTLS(t, p.addr, caFile, shortCert, shortKey)))
	kept := watch(good)
	wantRevoked(t, "WatchBranch with the expiring certificate", func() error { _, err := short.Recv(); return err }, "clientCertificate", "expired")
	if time.Now().Before(now.Add(2 * time.Second)) {
		t.Errorf("the stream ended at %v, before its certificate expired", time.Since(now))
	}
	if _, err := good.AddMessage(ctx, &historyv1.AddMessageRequest{
		BranchId: branch.GetBranch().GetId(),
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "still here"},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := kept.Recv()
		if err != nil {
			t.Fatalf("the stream with a valid certificate: %v", err)
		}
		if f.GetCommit() != nil {
			break
		}
	}
}
