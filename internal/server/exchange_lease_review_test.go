package server

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// The review of issue 18's server findings (/work/issues/review18.md: M1-M3, S3, N1, N4), each
// reproduced as the reviewer did. TestLeaseResponseBudget and TestLeasingStreamFrameTooLarge hold
// M1's Lease cut and frame too large.

// TestLeasingStreamSendFails (review M1: "A failed stream Send (the client may have got it): leave
// the lease to expire, do not Release and do not Nack"): a client that stops reading ends its
// leasing stream by the send timeout. The lease whose frame's Send failed, like those sent
// before it, stays held until its deadline; the rest of its batch, never sent, are given back as
// if never leased; nothing is Nack'ed, so with max_attempts 1 nothing is a dead letter.
func TestLeasingStreamSendFails(t *testing.T) {
	f := leaseStreamFixture(t, &historyv1.RegisterRequest{MaxAttempts: 1}, 0, WithSendTimeout(50*time.Millisecond))
	const n = 32
	flood(t, f, n) // in the inbox before the stream opens: its first Lease takes them all, one batch
	ended := f.streamEnd()
	subscribe(testContext(t), t, stalledClient(t, f), &historyv1.SubscribeInboxRequest{OwnerId: ownerB, Lease: true,
		MaxInFlight: n, VisibilityTimeout: secs(time.Hour)})
	if err := wait(t, ended); !errors.Is(err, errSendTimeout) {
		t.Fatalf("handler ended with %v, want the send timeout", err)
	}
	if dl := f.deadLettersB(t); len(dl) != 0 {
		t.Errorf("%d dead letters of B, want none: no lease was Nack'ed", len(dl))
	}
	r := f.receiveB(t)
	if len(r.GetMessages()) != n {
		t.Fatalf("Receive B = %d messages, want %d", len(r.GetMessages()), n)
	}
	var held, released int
	for i, m := range r.GetMessages() {
		st, ok := r.GetLeases()[m.GetId()]
		switch {
		case !ok:
			released++
		case st.GetLeased() && st.GetAttempts() == 1 && released == 0:
			held++
		default:
			t.Errorf("message %d: lease state %v (after %d held, %d given back); want held (sent, or its Send failed) before any given back, and none Nack'ed",
				i, st, held, released)
		}
	}
	// At least the lease whose Send failed is held, and a 64 KiB window stops the client well
	// before the 32 frames of about 33 KB.
	if held == 0 || released == 0 {
		t.Errorf("%d held and %d given back, want some of each", held, released)
	}
}

// TestLeasingStreamSurvivesABurst (review M2: a leasing stream used its subscription's events only
// as wake-ups, yet a burst that filled the buffer ended it as SUBSCRIBER_TOO_SLOW): one Collect of
// 1000 messages into the inbox of a leasing stream whose subscription holds 8 events; the stream
// delivers them all, in order, to a client that acks each as it comes.
func TestLeasingStreamSurvivesABurst(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithSubscriberBuffer(8)})
	f.register(t, ownerA, ownerB)
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB, Lease: true,
		OmitRendered: true, VisibilityTimeout: secs(time.Hour)})
	const n = 1000
	a, b := uuid.MustParse(ownerA), uuid.MustParse(ownerB)
	var sent []string
	for i := range n {
		m, err := f.ex.Send(exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(b), Content: jsonv.StringValue(strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m.ID.String())
	}
	if got := f.collect(t, ownerA).GetDeliveredCount(); got != n { // one Collect: n events at once
		t.Fatalf("Collect delivered %d, want %d", got, n)
	}
	var got []string
	for range n {
		l := nextLeased(t, s) // fails the test if the stream ended
		got = append(got, l.GetMessage().GetId())
		f.ack(t, l)
	}
	if !slices.Equal(got, sent) {
		t.Errorf("the stream delivered %d messages, not the %d sent in their order", len(got), n)
	}
}

// TestLeasingStreamBatchCutBySize (review M3: a batch cut by its size looked like "nothing more is
// visible", and the stream waited for the next wake-up, here the 1 h visibility): 6 visible
// messages of about 1.5 KB, a 6 KiB response budget (a batch of about three) and max_in_flight
// 16: all 6 arrive without any Ack.
func TestLeasingStreamBatchCutBySize(t *testing.T) {
	f := leaseStreamFixture(t, nil, 0)
	body := `"` + strings.Repeat("m", 1500) + `"`
	sent := f.deliver(t, body, body, body, body, body, body)
	f.es.maxResponse = 6 << 10 // after the Sends, which have a budget too
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB, Lease: true,
		MaxInFlight: 16, VisibilityTimeout: secs(time.Hour)})
	var got []string
	for range sent {
		got = append(got, nextLeased(t, s).GetMessage().GetId())
	}
	if !slices.Equal(got, ids(sent)) {
		t.Errorf("the stream delivered %v, want %v", got, ids(sent))
	}
}

// TestLeasingStreamNoRecheckByDefault (review S3: every stream held at its max_in_flight leased
// again every 250 ms, a write transaction on sqlite, for Acks on other replicas that the memory
// and sqlite engines never have): without WithLeaseRecheck a held stream does not lease on its
// own. Measured by the stream's own heartbeats: six idle intervals of about 100 ms pass, and the
// Exchange sees no Lease after the stream's first.
func TestLeasingStreamNoRecheckByDefault(t *testing.T) {
	spy := &leaseBudgetSpy{}
	f := newExchangeFixtureOver(t, nil, func(s exchange.Service) exchange.Service { spy.Service = s; return spy },
		WithHeartbeat(100*time.Millisecond))
	f.register(t, ownerA, ownerB)
	f.deliver(t, `"m1"`, `"m2"`)
	s := subscribe(testContext(t), t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB, Lease: true,
		MaxInFlight: 1, VisibilityTimeout: secs(time.Hour)})
	nextLeased(t, s) // held at max_in_flight from here
	leases := len(spy.maxBytes())
	for beats := 0; beats < 6; {
		frame, err := s.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if frame.GetHeartbeat() == nil {
			t.Fatalf("frame %v, want a heartbeat: the stream is held at its max_in_flight", frame)
		}
		beats++
	}
	if more := len(spy.maxBytes()) - leases; more != 0 {
		t.Errorf("the held stream leased %d times on its own, want none without WithLeaseRecheck", more)
	}
}

// TestNackDelayUnderAMillisecond (review N1: the proto bounds Nack's delay by "at most 12h" only):
// a delay of 500µs is taken as it is, and 12h is the longest.
func TestNackDelayUnderAMillisecond(t *testing.T) {
	f, clk := newLeaseFixture(t, nil, nil)
	sent := f.deliver(t, `"m1"`)
	ctx := testContext(t)
	l := f.lease(t, &historyv1.LeaseRequest{}).GetLeased()[0]
	const delay = 500 * time.Microsecond
	if _, err := f.client.Nack(ctx, &historyv1.NackRequest{OwnerId: ownerB, Receipt: l.GetReceipt(), Delay: secs(delay)}); err != nil {
		t.Fatalf("Nack with a delay of %v: %v", delay, err)
	}
	if st := f.receiveB(t).GetLeases()[sent[0].GetId()]; !st.GetVisibleTime().AsTime().Equal(clk.Now().Add(delay)) || st.GetLeased() {
		t.Errorf("after the Nack: %v, want visible at now + %v, not leased", st, delay)
	}
	clk.Add(delay)
	again := f.lease(t, &historyv1.LeaseRequest{}).GetLeased()
	if len(again) != 1 || again[0].GetAttempt() != 2 {
		t.Fatalf("Lease after the delay = %v, want the message, attempt 2", again)
	}
	if _, err := f.client.Nack(ctx, &historyv1.NackRequest{OwnerId: ownerB, Receipt: again[0].GetReceipt(), Delay: secs(exchange.MaxVisibility)}); err != nil {
		t.Errorf("Nack with a delay of %v: %v", exchange.MaxVisibility, err)
	}
}

// TestReceiveLeasedOnTheEnginesClock (review N4: Receive's leased was read at the server's own
// clock, not the engine's): an Exchange whose clock stands in 2001, with the server given the same
// clock (WithClock), shows a lease of 10 s as leased; read at the wall clock, long past its
// deadline, it would not be.
func TestReceiveLeasedOnTheEnginesClock(t *testing.T) {
	start := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	f, clk := newLeaseFixtureAt(t, start, nil, nil)
	sent := f.deliver(t, `"m1"`)
	f.lease(t, &historyv1.LeaseRequest{VisibilityTimeout: secs(10 * time.Second)})
	st := f.receiveB(t).GetLeases()[sent[0].GetId()]
	if !st.GetLeased() || st.GetAttempts() != 1 || !st.GetVisibleTime().AsTime().Equal(start.Add(10*time.Second)) {
		t.Errorf("Receive during the lease = %v, want leased, attempt 1, visible at %v", st, start.Add(10*time.Second))
	}
	clk.Add(10 * time.Second)
	if st := f.receiveB(t).GetLeases()[sent[0].GetId()]; st.GetLeased() {
		t.Errorf("Receive at the deadline = %v, want not leased", st)
	}
}
