//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 11's hostile cases on the Exchange side, against the real binary: case 3 (PopMessage lost
// a message its client could not receive) and case 7 (the Exchange had no byte bound, Receive no
// response bound, SubscribeInbox no stream limit, and Send's request-id log kept whole messages).

const (
	hxOwnerA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	hxOwnerB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	// defaultClientRecv is a default grpc-go client's receive limit, 4 MiB.
	defaultClientRecv = 4 << 20
	// attemptWave is how many SubscribeInbox attempts openInboxStreams has in flight at once, as
	// the issue-7 suite's waves of 1,000 streams.
	attemptWave = 1_000
)

// errorMetadata returns the ErrorInfo metadata of a status error.
func errorMetadata(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()
		}
	}
	return nil
}

// inboxCount is owner's inbox count and outbox count from ListOwners.
func inboxCount(ctx context.Context, t *testing.T, ex historyv1.ExchangeServiceClient, owner string) (inbox, queued int64) {
	t.Helper()
	for token := ""; ; {
		resp, err := ex.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("ListOwners: %v", err)
		}
		for _, o := range resp.GetOwners() {
			if o.GetOwnerId() == owner {
				return o.GetInboxCount(), o.GetQueuedCount()
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			t.Fatalf("owner %s not listed", owner)
		}
	}
}

// registerPair registers A and B.
func registerPair(ctx context.Context, t *testing.T, ex historyv1.ExchangeServiceClient) {
	t.Helper()
	for _, o := range []string{hxOwnerA, hxOwnerB} {
		if _, err := ex.Register(ctx, &historyv1.RegisterRequest{OwnerId: o}); err != nil {
			t.Fatalf("Register(%s): %v", o, err)
		}
	}
}

// jsonString is a JSON string of n bytes' content.
func jsonString(n int, fill string) string { return `"` + strings.Repeat(fill, n) + `"` }

// TestHostileExchangePopTooLarge (issue 11 case 3: "A message larger than a default client's
// receive limit is never removed by a read that failed"): a message of 2.5 MB comes back from a
// read as about twice that with its rendering, over a default client's 4 MiB. Against a default
// server, PopMessage from a default client is refused cleanly by the server (RESOURCE_EXHAUSTED,
// RESPONSE_TOO_LARGE, with figures), the message stays in the inbox, and omit_rendered then takes
// it whole. Against a server with a larger --max-response-bytes, a client with as large a receive
// limit pops it whole, rendered.
func TestHostileExchangePopTooLarge(t *testing.T) {
	const size = 2_500_000 // over ~2.1 MiB, under the default --max-recv-msg-size of 4 MiB
	body := jsonString(size, "m")
	// queue sends the message from A to B and collects it; Send's response is within 4 MiB (its
	// rendering left out), so a default client reads the acknowledgement.
	queue := func(ctx context.Context, t *testing.T, ex historyv1.ExchangeServiceClient) string {
		t.Helper()
		registerPair(ctx, t, ex)
		sent, err := ex.Send(ctx, &historyv1.SendRequest{Sender: hxOwnerA, Recipient: structString(hxOwnerB), ContentJson: &body})
		if err != nil {
			t.Fatalf("Send of %d bytes: %v", size, err)
		}
		if _, err := ex.Collect(ctx, &historyv1.CollectRequest{OwnerId: hxOwnerA}); err != nil {
			t.Fatal(err)
		}
		return sent.GetMessage().GetId()
	}
	popped := func(ctx context.Context, t *testing.T, ex historyv1.ExchangeServiceClient, id string, omit bool) {
		t.Helper()
		got, err := ex.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: hxOwnerB, Sender: hxOwnerA, OmitRendered: omit})
		if err != nil || got.GetMessage().GetId() != id || len(got.GetMessage().GetGeneric().GetContentJson()) != len(body) {
			t.Fatalf("PopMessage(omit_rendered=%v) = %v; want the whole message", omit, err)
		}
		if (got.GetMessage().GetRendered() == nil) != omit {
			t.Errorf("rendered present = %v with omit_rendered=%v", got.GetMessage().GetRendered() != nil, omit)
		}
		t.Logf("popped with omit_rendered=%v: a response of %d bytes", omit, proto.Size(got))
		if in, _ := inboxCount(ctx, t, ex, hxOwnerB); in != 0 {
			t.Errorf("after the pop B's inbox holds %d messages", in)
		}
	}

	t.Run("default budget and client", func(t *testing.T) {
		p := startServer(t)
		ex := historyv1.NewExchangeServiceClient(dial(t, p)) // a default client: 4 MiB receive limit
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		id := queue(ctx, t, ex)
		_, err := ex.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: hxOwnerB, Sender: hxOwnerA})
		md := errorMetadata(err)
		t.Logf("PopMessage with rendering: %v %q; metadata %v", status.Code(err), status.Convert(err).Message(), md)
		if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != "ERROR_REASON_RESPONSE_TOO_LARGE" ||
			md["messageId"] != id || md["flag"] != "--max-response-bytes" || md["maxResponseBytes"] != "4194304" {
			t.Fatalf("PopMessage of a %d-byte message = %v, want RESOURCE_EXHAUSTED RESPONSE_TOO_LARGE from the server naming it", size, err)
		}
		if n, _ := strconv.Atoi(md["responseBytes"]); n <= defaultClientRecv {
			t.Errorf("responseBytes %d, want over 4 MiB", n)
		}
		if in, _ := inboxCount(ctx, t, ex, hxOwnerB); in != 1 {
			t.Fatalf("after the refused pop B's inbox holds %d messages, want 1 (the message was lost)", in)
		}
		popped(ctx, t, ex, id, true)
		stopClean(t, p)
	})

	t.Run("larger budget and client", func(t *testing.T) {
		const limit = 16 << 20
		p := startServer(t, "--max-response-bytes", strconv.Itoa(limit))
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ex := historyv1.NewExchangeServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		popped(ctx, t, ex, queue(ctx, t, ex), false)
		stopClean(t, p)
	})
}

// TestHostileExchangeFlood (issue 11 case 7): with a small --exchange-max-bytes, a flood of 1 MB
// Sends fails with EXCHANGE_BUDGET_EXCEEDED and figures once the budget is full, and nothing is
// dropped (every accepted message is delivered); a Receive of page_size 1000 comes back within a
// default client's 4 MiB; SubscribeInbox past --inbox-max-streams is TOO_MANY_STREAMS; Sends with
// request ids, once consumed, leave no bodies behind. Peak RSS stays within the budget x 2 + 100 MB
// ("the Exchange flood (case 7) at most its byte budget x 2 plus 100 MB").
func TestHostileExchangeFlood(t *testing.T) {
	budget := hostileSize(64<<20, 16<<20)
	sends := hostileSize(1_500, 40)        // of 1 MB: far past the budget
	streamLimit := hostileSize(1_000, 100) // --inbox-max-streams
	streamAttempts := hostileSize(20_000, 300)
	idSends := hostileSize(3_000, 300) // of 100 KB, with request ids, then consumed
	p := startServerBinary(t, testhookBin,
		"--exchange-max-bytes", strconv.Itoa(budget),
		"--inbox-max-streams", strconv.Itoa(streamLimit),
		"--metrics-addr", "127.0.0.1:0")
	metrics := logAddress(t, p, "serving metrics")
	conn := dial(t, p)
	ex := historyv1.NewExchangeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*startTimeout)
	defer cancel()
	registerPair(ctx, t, ex)
	// Every phase's peak is measured against the idle server (the acceptance bound of case 7).
	idle := procMem(t, p)
	bound := int64(2*budget) + 100e6

	t.Run("request ids, consumed: memory released", func(t *testing.T) {
		resetPeak(t, p)
		before := liveHeap(ctx, t, conn, metrics)
		body := jsonString(100_000, "i")
		req := func(i int) *historyv1.SendRequest {
			return &historyv1.SendRequest{Sender: hxOwnerA, Recipient: structString(hxOwnerB), ContentJson: &body,
				RequestId: fmt.Sprintf("flood-%06d", i)}
		}
		var firstID string
		const batch = 50 // 5 MB at a time, inside every budget
		for i := 0; i < idSends; i += batch {
			for j := i; j < min(i+batch, idSends); j++ {
				resp, err := ex.Send(ctx, req(j))
				if err != nil {
					t.Fatalf("Send %d: %v", j, err)
				}
				if j == 0 {
					firstID = resp.GetMessage().GetId()
				}
			}
			if _, err := ex.Collect(ctx, &historyv1.CollectRequest{OwnerId: hxOwnerA}); err != nil {
				t.Fatal(err)
			}
			for j := i; j < min(i+batch, idSends); j++ {
				if _, err := ex.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: hxOwnerB, Sender: hxOwnerA, OmitRendered: true}); err != nil {
					t.Fatalf("PopMessage %d: %v", j, err)
				}
			}
		}
		after := liveHeap(ctx, t, conn, metrics)
		grew := after - before
		t.Logf("%d sends of 100 KB with request ids, consumed: live heap %.1f MB -> %.1f MB (%+.1f MB)",
			idSends, before/1e6, after/1e6, grew/1e6)
		if grew > 16e6 {
			t.Errorf("live heap grew %.1f MB after the messages were consumed, over 16 MB: the request log keeps them", grew/1e6)
		}
		again, err := ex.Send(ctx, req(0))
		if err != nil || again.GetMessage().GetId() != firstID || len(again.GetMessage().GetGeneric().GetContentJson()) != len(body) {
			t.Errorf("repeat of the first request after consumption = %v; want the first message whole", err)
		}
		if _, queued := inboxCount(ctx, t, ex, hxOwnerA); queued != 0 {
			t.Errorf("the repeat queued %d messages", queued)
		}
		assertPeakWithin(t, p, idle, bound, "sends with request ids")
	})

	t.Run("flood of 1 MB sends", func(t *testing.T) {
		resetPeak(t, p)
		body := jsonString(1_000_000, "f")
		accepted, refused := 0, 0
		for i := range sends {
			_, err := ex.Send(ctx, &historyv1.SendRequest{Sender: hxOwnerA, Recipient: structString(hxOwnerB), ContentJson: &body})
			switch {
			case err == nil:
				if refused > 0 {
					t.Fatalf("send %d accepted after a refusal with nothing consumed", i)
				}
				accepted++
			case status.Code(err) == codes.ResourceExhausted && reasonOf(err) == "ERROR_REASON_EXCHANGE_BUDGET_EXCEEDED":
				md := errorMetadata(err)
				used, _ := strconv.Atoi(md["usedBytes"])
				need, _ := strconv.Atoi(md["messageBytes"])
				if md["budgetBytes"] != strconv.Itoa(budget) || md["flag"] != "--exchange-max-bytes" || used+need <= budget || need < 1_000_000 {
					t.Fatalf("refusal metadata %v: want the used bytes, the budget %d, the message's size and the flag", md, budget)
				}
				if refused == 0 {
					t.Logf("send %d refused: %v; metadata %v", i, status.Convert(err).Message(), md)
				}
				refused++
			default:
				t.Fatalf("send %d: %v", i, err)
			}
		}
		t.Logf("%d of %d sends of 1 MB accepted into a %d MiB budget, %d refused", accepted, sends, budget>>20, refused)
		if refused == 0 || accepted == 0 {
			t.Fatalf("accepted %d, refused %d: the flood must cross the budget", accepted, refused)
		}
		if _, err := ex.Collect(ctx, &historyv1.CollectRequest{OwnerId: hxOwnerA}); err != nil {
			t.Fatal(err)
		}
		if in, _ := inboxCount(ctx, t, ex, hxOwnerB); in != int64(accepted) {
			t.Fatalf("B's inbox holds %d messages after %d accepted sends: mail was dropped", in, accepted)
		}

		// Receive page_size 1000 from a default client: a page within 4 MiB that continues.
		read := 0
		for token, pages := "", 0; ; pages++ {
			resp, err := ex.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: hxOwnerB, PageSize: 1000, PageToken: token})
			if err != nil {
				t.Fatalf("Receive page %d: %v", pages, err)
			}
			if n := proto.Size(resp); n > defaultClientRecv || len(resp.GetMessages()) == 0 {
				t.Fatalf("Receive page of %d bytes with %d messages", n, len(resp.GetMessages()))
			}
			if pages == 0 {
				t.Logf("first Receive page_size 1000: %d messages, %d bytes", len(resp.GetMessages()), proto.Size(resp))
			}
			read += len(resp.GetMessages())
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		if read != accepted {
			t.Errorf("Receive pages returned %d messages, want %d", read, accepted)
		}
		assertPeakWithin(t, p, idle, bound, "Exchange flood")
		used, _ := scrape(t, metrics).get("historyd_exchange_used_bytes")
		t.Logf("historyd_exchange_used_bytes after the flood: %.0f of %d", used, budget)
		if used <= 0 || used > float64(budget) {
			t.Errorf("historyd_exchange_used_bytes = %.0f, want the mail held, within the budget %d", used, budget)
		}

		// Making room lets Send in again.
		if _, err := ex.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: hxOwnerB, Sender: hxOwnerA, OmitRendered: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := ex.Send(ctx, &historyv1.SendRequest{Sender: hxOwnerA, Recipient: structString(hxOwnerB), ContentJson: &body}); err != nil {
			t.Errorf("Send after a pop made room: %v", err)
		}
	})

	t.Run("SubscribeInbox past --inbox-max-streams", func(t *testing.T) {
		resetPeak(t, p)
		opened, refused := openInboxStreams(t, p.addr, streamAttempts)
		t.Logf("%d SubscribeInbox streams attempted with --inbox-max-streams %d: %d opened, %d refused",
			streamAttempts, streamLimit, opened, refused)
		if opened != streamLimit || refused != streamAttempts-streamLimit {
			t.Errorf("opened %d, refused %d; want %d and %d", opened, refused, streamLimit, streamAttempts-streamLimit)
		}
		assertPeakWithin(t, p, idle, bound, "SubscribeInbox flood (the Exchange full)")
	})
	stopClean(t, p)
}

// stopClean ends p with SIGTERM and expects a clean exit: the server survived the case.
func stopClean(t *testing.T, p *proc) {
	t.Helper()
	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Errorf("historyd exit code %d after SIGTERM, want 0", code)
	}
}

// structString is a google.protobuf.Value string.
func structString(s string) *structpb.Value { return structpb.NewStringValue(s) }

// openInboxStreams opens n SubscribeInbox streams of B over connections of 100, at most
// attemptWave attempts in flight at once, and counts those that got their first frame (opened) and
// those refused with TOO_MANY_STREAMS; any other outcome fails the test. It closes every connection
// before it returns. The wave bounds the streams the server holds at once while it answers them
// (the open ones plus one wave): how many calls can arrive at once is the connection limits' part
// (--max-concurrent-streams per connection, times connections), not --inbox-max-streams'.
func openInboxStreams(t *testing.T, addr string, n int) (opened, refused int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*startTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		other []error
	)
	conns := make([]*grpc.ClientConn, (n+99)/100)
	for c := range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns[c] = conn
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	wave := make(chan struct{}, attemptWave)
	for i := range n {
		wg.Add(1)
		wave <- struct{}{}
		go func() { // ends with the stream's first frame or its refusal; the stream stays open until its connection closes
			defer wg.Done()
			defer func() { <-wave }()
			s, err := historyv1.NewExchangeServiceClient(conns[i/100]).SubscribeInbox(ctx, &historyv1.SubscribeInboxRequest{OwnerId: hxOwnerB})
			if err == nil {
				_, err = s.Recv()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				opened++
			case status.Code(err) == codes.ResourceExhausted && reasonOf(err) == "ERROR_REASON_TOO_MANY_STREAMS":
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range other {
		t.Errorf("SubscribeInbox: %v", err)
	}
	return opened, refused
}

// liveHeap is the server's live heap after the test hook forced garbage collection: the least of
// three readings of go_memstats_heap_alloc_bytes (see hostileServer.heap).
func liveHeap(ctx context.Context, t *testing.T, conn *grpc.ClientConn, metrics string) float64 {
	t.Helper()
	least := math.Inf(1)
	for range 3 {
		if err := testHook(ctx, conn, "GC"); err != nil {
			t.Fatalf("TestHook/GC: %v", err)
		}
		v, ok := scrape(t, metrics).get("go_memstats_heap_alloc_bytes")
		if !ok {
			t.Fatal("no go_memstats_heap_alloc_bytes on the metrics page")
		}
		least = min(least, v)
	}
	return least
}
