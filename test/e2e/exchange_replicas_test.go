//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Issue 17 acceptance: "`make e2e` prints ... for two postgres replicas `exchange replicas: S sent,
// D delivered once, L dead-lettered, E evicted, 0 lost, 0 duplicated`", for "postgres: two
// replicas: owners registered on A, Sends through B, Collect on A, Receive and Pop on B;
// SubscribeInbox on B sees deliveries collected on A; concurrent PopMessage calls for the same inbox
// on different replicas never return the same message", and "Conservation everywhere, kept as a
// ledger per (message, recipient)": each delivery of an acknowledged Send is in exactly one state
// (outbox, inbox, popped by exactly one PopMessage, returned by Unregister, a dead letter with its
// reason, or evicted and counted).
//
// Issue 18 adds: "competing leasers on different replicas never hold the same message at once". So
// r0's inboxes are also leased, on A and on B at the same moment, while they are popped on both:
// each leaser acknowledges what it leased, or nacks it (visible again at once; at max_attempts, 2,
// a dead letter of r0). r0's leases last xrVisibility, far longer than the test: no lease expires,
// so every Ack and Nack must succeed (a stale one means another leaser took the message while it
// was held), and each message's leases are attempts 1, 2, ... in turn, each handed out once.

const (
	xrSends        = 200 // Sends by each of the two long-running senders; the third sends half, then leaves
	xrMaxInbox     = 5   // --exchange-max-inbox: the hoarder, who never pops, fills its inboxes
	xrMaxDead      = 10  // --exchange-max-dead-letters: the senders' dead letters overflow, and are evicted
	xrRepeatEvery  = 5   // every 5th Send is repeated on A with its request id, after B's answer
	xrAtOnceEvery  = 10  // every 10th is sent to A and B at the same moment instead
	xrStreamWait   = 10 * time.Second
	xrDescribeMost = 20 // violations described; all are counted
	// r0's lease settings: no lease expires during the test; a message nacked twice is a dead
	// letter of r0.
	xrMaxAttempts = 2
	xrVisibility  = 5 * time.Minute
	xrNackPercent = 15 // of the leases a leaser nacks; it acknowledges the rest, but for stubborn messages
)

// xrStubborn reports whether the leasers nack every lease of message id (an eighth of them, by the
// id's last hex digit): each such message ends as a max-attempts dead letter of r0 unless a
// PopMessage takes it between two leases.
func xrStubborn(id string) bool {
	return id != "" && strings.IndexByte("08", id[len(id)-1]) >= 0
}

// xrOwners are the test's registered owners, all registered on replica A.
type xrOwners struct {
	senders   [3]uuid.UUID // s0, s1 send throughout; s2 sends xrSends/2 and is unregistered on B mid-load
	receivers [2]uuid.UUID // r0, r1 pop on both replicas at once; r0 is leased on both too; r1 is subscribed on B
	hoarder   uuid.UUID    // never pops: its inboxes stay full; unregistered on A at the end
}

func (o xrOwners) all() []uuid.UUID {
	return append(append(o.senders[:], o.receivers[:]...), o.hoarder)
}

// TestExchangeReplicas: two replicas A and B on one schema. Owners are registered on A; three
// senders Send through B with request ids (every fifth repeated on A afterwards, every tenth sent
// to A and B at once: each writes once), direct to owners, broadcast, to unknown owners (dead
// letters), to a hoarder whose small inboxes overflow (dead letters "inbox full") until the senders'
// dead-letter bound evicts; a collector on A collects; two receivers' inboxes are popped on A and B
// at the same moment; a SubscribeInbox stream on B follows one receiver; a sender is unregistered on
// B mid-load and the hoarder on A at the end. Then the ledger (read from the database) is compared
// with every answer the clients got.
func TestExchangeReplicas(t *testing.T) {
	noLeaks(t)
	began := time.Now()
	url := pgtest.New(t)
	bounds := []string{"--exchange-max-inbox", fmt.Sprint(xrMaxInbox), "--exchange-max-dead-letters", fmt.Sprint(xrMaxDead)}
	pa, pb := startReplicaProcess(t, url, bounds...), startReplicaProcess(t, url, bounds...)
	awaitServing(t, pa)
	awaitServing(t, pb)
	ctx, cancel := context.WithTimeout(context.Background(), 4*startTimeout)
	defer cancel()
	r := driveExchangeReplicas(ctx, t, pa, pb)
	entries := readPostgresLedger(ctx, t, url)
	c := r.check(entries)
	fmt.Printf("exchange replicas: %d sent, %d delivered once, %d dead-lettered, %d evicted, %d lost, %d duplicated, %d leased, %d acked once\n",
		c.sent, c.delivered, c.deadLettered, c.evicted, c.lost, c.duplicated, c.leased, c.acked)
	t.Logf("%d pops on A, %d on B (the same inboxes at once), %d leases on A, %d on B (r0's inboxes at once), %d nacked, %d max-attempts dead letters, "+
		"%d messages streamed on B, %d ledger entries; seed %d; %v",
		r.popsOn("A"), r.popsOn("B"), r.leasesOn("A"), r.leasesOn("B"), c.nacked, c.maxDead, len(r.seen), len(entries), r.seed, time.Since(began).Round(time.Millisecond))
	for _, v := range c.violations[:min(len(c.violations), xrDescribeMost)] {
		t.Error(v)
	}
	if c.lost+c.duplicated != 0 {
		t.Fatalf("%d lost, %d duplicated (seed %d)", c.lost, c.duplicated, r.seed)
	}
	if c.delivered == 0 || c.deadLettered == 0 || c.evicted == 0 || r.popsOn("A") == 0 || r.popsOn("B") == 0 || len(r.seen) == 0 ||
		r.leasesOn("A") == 0 || r.leasesOn("B") == 0 || c.acked == 0 || c.maxDead == 0 {
		t.Fatalf("%d delivered, %d dead-lettered, %d evicted, %d pops on A, %d on B, %d streamed, %d leases on A, %d on B, %d acked, %d max-attempts dead letters: part of the test did not happen",
			c.delivered, c.deadLettered, c.evicted, r.popsOn("A"), r.popsOn("B"), len(r.seen), r.leasesOn("A"), r.leasesOn("B"), c.acked, c.maxDead)
	}
	stopReplicas(t, pa, pb)
}

// driveExchangeReplicas runs the traffic of TestExchangeReplicas on replicas pa (A) and pb (B),
// then reads what the live owners hold, and returns the record of every answer.
func driveExchangeReplicas(ctx context.Context, t *testing.T, pa, pb *proc) *xrRun {
	t.Helper()
	r := &xrRun{
		t: t, a: historyv1.NewExchangeServiceClient(dial(t, pa)), b: historyv1.NewExchangeServiceClient(dial(t, pb)),
		sent: map[string]*xrSent{}, sentBy: map[uuid.UUID]int{}, ridMsgs: map[string]map[string]int{},
		collected: map[string][]xrDelivery{}, pops: map[xrKey][]string{}, returned: map[xrKey]bool{},
		evicted: map[uuid.UUID]uint64{}, leaving: map[uuid.UUID]bool{}, seed: rand.Uint64(),
		grants: map[xrKey][]xrGrant{}, acks: map[xrKey][]int{}, nacks: map[xrKey][]int{}, nackDead: map[xrKey]int{},
	}
	o := &r.owners
	for i := range o.senders {
		o.senders[i] = uuid.New()
	}
	for i := range o.receivers {
		o.receivers[i] = uuid.New()
	}
	o.hoarder = uuid.New()
	for _, id := range o.all() {
		req := &historyv1.RegisterRequest{OwnerId: id.String()}
		if id == o.receivers[0] {
			req.MaxAttempts, req.VisibilityTimeout = xrMaxAttempts, durationpb.New(xrVisibility)
		}
		if _, err := r.a.Register(ctx, req); err != nil {
			t.Fatalf("Register %s on A: %v", id, err)
		}
	}

	// The stream on B opens before any mail moves: its first frame is a heartbeat, sent once the
	// subscription is live, so every delivery to r1 from here on must reach it.
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	stream, err := r.b.SubscribeInbox(streamCtx, &historyv1.SubscribeInboxRequest{OwnerId: o.receivers[1].String(), OmitRendered: true})
	if err != nil {
		t.Fatalf("SubscribeInbox r1 on B: %v", err)
	}
	if f, err := stream.Recv(); err != nil || f.GetHeartbeat() == nil {
		t.Fatalf("SubscribeInbox r1 on B: first frame %v, %v; want a heartbeat", f, err)
	}
	// The reader keeps up whatever the test does meanwhile (a reader that stopped reading would
	// end the stream as too slow): it appends to sub and says so on its notify channel.
	sub := &xrStream{notify: make(chan struct{}, 1), done: make(chan struct{})}
	var streaming sync.WaitGroup
	defer streaming.Wait() // after stopStream: deferred calls run last first
	streaming.Go(func() { sub.read(stream) })

	stop := make(chan struct{})
	var load sync.WaitGroup
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		load.Wait()
	})
	defer stopLoad() // on a t.Fatalf during the load
	for _, rcv := range o.receivers {
		for _, rep := range []string{"A", "B"} {
			load.Go(func() { r.popper(ctx, stop, rep, rcv, o.senders[:]) })
		}
	}
	for i, rep := range []string{"A", "B"} {
		rng := rand.New(rand.NewPCG(r.seed, uint64(len(o.senders)+i)))
		load.Go(func() { r.leaser(ctx, stop, rep, o.receivers[0], rng) })
	}
	load.Go(func() { r.collector(ctx, stop, o.senders[:]) })
	load.Go(func() { r.peeker(ctx, stop, o.receivers[0]) })
	var senders sync.WaitGroup
	for i, s := range o.senders {
		n := xrSends
		if i == 2 {
			n = xrSends / 2
		}
		rng := rand.New(rand.NewPCG(r.seed, uint64(i)))
		senders.Go(func() { r.sender(ctx, rng, s, n) })
	}
	// s2 leaves on B while s0 and s1 still send to it and A collects: each delivery to it lands
	// before (and is returned in its Flow) or after (a dead letter "recipient left").
	r.waitSent(ctx, o.senders[2], xrSends/2)
	r.unregister(ctx, "B", o.senders[2])
	senders.Wait()
	stopLoad()
	if errs := r.errors(); len(errs) > 0 {
		for _, e := range errs[:min(len(errs), xrDescribeMost)] {
			t.Error(e)
		}
		t.Fatalf("%d calls failed during the load (seed %d)", len(errs), r.seed)
	}

	// Everything queued is routed: no outbox entry stays, except what s2's Unregister returned.
	all, err := r.a.CollectAll(ctx, &historyv1.CollectAllRequest{IncludeReachedOwnerIds: true})
	if err != nil {
		t.Fatalf("the final CollectAll on A: %v", err)
	}
	for _, c := range all.GetCollects() {
		r.record(c.GetDeliveries(), all.GetReportTruncated())
	}
	r.want = r.reachedBy(o.receivers[1])
	sub.await(len(r.want), xrStreamWait)
	r.unregister(ctx, "A", o.hoarder)
	stopStream()
	streaming.Wait()
	r.seen, err = sub.result()
	if err != nil && status.Code(err) != codes.Canceled && !errors.Is(err, io.EOF) {
		t.Errorf("SubscribeInbox r1 on B ended with %v before the test ended it", err)
	}
	if errs := r.errors(); len(errs) > 0 {
		t.Fatalf("after the load: %v", errs)
	}
	r.final = r.readFinal(ctx, []uuid.UUID{o.senders[0], o.senders[1], o.receivers[0], o.receivers[1]})
	return r
}

// xrStream is what a SubscribeInbox stream delivered, read by its own goroutine.
type xrStream struct {
	mu     sync.Mutex
	seen   []string      // message ids, in order
	err    error         // why the stream ended, once done is closed
	notify chan struct{} // capacity 1: something was appended
	done   chan struct{} // closed when the stream has ended
}

// read receives until the stream ends.
func (s *xrStream) read(stream historyv1.ExchangeService_SubscribeInboxClient) {
	defer close(s.done)
	for {
		f, err := stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.err = err
			s.mu.Unlock()
			return
		}
		if m := f.GetMessage(); m != nil {
			s.seen = append(s.seen, m.GetId())
		}
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// await returns once n messages were streamed, the stream ended, or wait passed.
func (s *xrStream) await(n int, wait time.Duration) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got := len(s.seen)
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-s.notify:
		case <-s.done:
			return
		case <-deadline.C:
			return
		}
	}
}

// result returns what was streamed and why the stream ended; call it once read has returned.
func (s *xrStream) result() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, s.err
}

// xrKey is one (message, recipient) of the ledger, as the clients can name it.
type xrKey struct {
	msg, rcpt string
}

// xrSent is an acknowledged Send.
type xrSent struct {
	sender uuid.UUID
	rid    string
}

// xrDelivery is one message's routing in a Collect or CollectAll report.
type xrDelivery struct {
	reached []string
	drops   []xrDrop
}

// xrDrop is one recipient a report says the message missed, and why.
type xrDrop struct {
	rcpt   string
	reason historyv1.DeadLetterReason
}

// xrRun is what the clients were answered, guarded by mu.
type xrRun struct {
	t    *testing.T
	a, b historyv1.ExchangeServiceClient

	mu        sync.Mutex
	sent      map[string]*xrSent        // by message id
	sentBy    map[uuid.UUID]int         // acknowledged Sends per sender
	collected map[string][]xrDelivery   // by message id: every report that routed it
	pops      map[xrKey][]string        // (message, owner): the replicas whose PopMessage returned it
	returned  map[xrKey]bool            // what Unregister responses returned: (message, holder's key)
	evicted   map[uuid.UUID]uint64      // dead letters evicted, from unregistered owners' Flows
	leaving   map[uuid.UUID]bool        // owners whose Unregister has been sent
	errs      []string                  // calls that failed
	ridMsgs   map[string]map[string]int // request id -> message ids answered (more than one: written twice)
	grants    map[xrKey][]xrGrant       // (message, owner): the leases handed out, in the order they were seen
	acks      map[xrKey][]int           // (message, owner): the attempts of the Acks that succeeded
	nacks     map[xrKey][]int           // (message, owner): the attempts of the Nacks that succeeded
	nackDead  map[xrKey]int             // (message, owner): the attempt of the Nack that made a dead letter of it
	stale     []string                  // Acks and Nacks refused as stale: another leaser took a held message

	// Set by driveExchangeReplicas, read by check.
	seed   uint64
	owners xrOwners
	seen   []string        // what the stream on B delivered, in order
	want   map[string]bool // what the reports say reached the streamed owner
	final  xrFinal
}

func (r *xrRun) client(rep string) historyv1.ExchangeServiceClient {
	if rep == "A" {
		return r.a
	}
	return r.b
}

func (r *xrRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *xrRun) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

// sender sends n messages from s through B: direct to an owner (possibly one that has left),
// broadcast, to an unknown owner, or to the hoarder.
func (r *xrRun) sender(ctx context.Context, rng *rand.Rand, s uuid.UUID, n int) {
	o := r.owners
	others := []uuid.UUID{o.receivers[0], o.receivers[1], o.hoarder}
	for _, x := range o.senders {
		if x != s {
			others = append(others, x)
		}
	}
	for i := range n {
		req := &historyv1.SendRequest{Sender: s.String(), RequestId: fmt.Sprintf("%s-%d", s, i), ContentJson: proto.String(fmt.Sprintf(`{"n": %d}`, i))}
		switch p := rng.IntN(100); {
		case p < 55:
			req.Recipient = structpb.NewStringValue(others[rng.IntN(len(others))].String())
		case p < 70:
			req.Recipient = structpb.NewNullValue()
		case p < 85:
			req.Recipient = structpb.NewStringValue(uuid.NewString()) // never registered
		default:
			req.Recipient = structpb.NewStringValue(o.hoarder.String())
		}
		var err error
		if i%xrAtOnceEvery == 0 {
			err = r.sendAtOnce(ctx, req)
		} else {
			err = r.send(ctx, "B", req)
			if err == nil && i%xrRepeatEvery == 0 {
				err = r.send(ctx, "A", req)
			}
		}
		if err != nil {
			r.fail("%v", err)
			return
		}
	}
}

// send sends req through one replica and records the answer.
func (r *xrRun) send(ctx context.Context, rep string, req *historyv1.SendRequest) error {
	resp, err := r.client(rep).Send(ctx, req)
	if err != nil {
		return fmt.Errorf("Send %s on %s: %w", req.GetRequestId(), rep, err)
	}
	r.sentAck(req, resp.GetMessage().GetId())
	return nil
}

// sendAtOnce sends req to A and B at the same moment: both must answer with one message (a
// retryable failure is asked again, as a client would).
func (r *xrRun) sendAtOnce(ctx context.Context, req *historyv1.SendRequest) error {
	var errs [2]error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j, rep := range []string{"A", "B"} {
		wg.Go(func() {
			<-start
			if errs[j] = r.send(ctx, rep, req); status.Code(errors.Unwrap(errs[j])) == codes.Unavailable || status.Code(errors.Unwrap(errs[j])) == codes.Aborted {
				errs[j] = r.send(ctx, rep, req)
			}
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs[:]...)
}

// sentAck records that req was answered with message id.
func (r *xrRun) sentAck(req *historyv1.SendRequest, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.ridMsgs[req.GetRequestId()]
	if ids == nil {
		ids = map[string]int{}
		r.ridMsgs[req.GetRequestId()] = ids
		r.sentBy[uuid.MustParse(req.GetSender())]++
	}
	ids[id]++
	if _, ok := r.sent[id]; !ok {
		r.sent[id] = &xrSent{sender: uuid.MustParse(req.GetSender()), rid: req.GetRequestId()}
	}
}

// waitSent waits until s has n acknowledged Sends (or a call failed, or ctx ended).
func (r *xrRun) waitSent(ctx context.Context, s uuid.UUID, n int) {
	tick := time.NewTicker(5 * time.Millisecond) // paces the polls of the senders' progress
	defer tick.Stop()
	for {
		r.mu.Lock()
		done := r.sentBy[s] >= n || len(r.errs) > 0
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// collector collects the senders on A until stop, every fifth round with CollectAll.
func (r *xrRun) collector(ctx context.Context, stop <-chan struct{}, senders []uuid.UUID) {
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		if round%5 == 4 {
			all, err := r.a.CollectAll(ctx, &historyv1.CollectAllRequest{IncludeReachedOwnerIds: true})
			if err != nil {
				r.fail("CollectAll on A: %v", err)
				return
			}
			for _, c := range all.GetCollects() {
				r.record(c.GetDeliveries(), all.GetReportTruncated())
			}
			continue
		}
		s := senders[round%len(senders)]
		resp, err := r.a.Collect(ctx, &historyv1.CollectRequest{OwnerId: s.String(), IncludeReachedOwnerIds: true})
		if err != nil {
			r.mu.Lock()
			left := r.leaving[s]
			r.mu.Unlock()
			if left && status.Code(err) == codes.FailedPrecondition {
				continue // s has left (or is leaving): there is nothing of its to collect
			}
			r.fail("Collect %s on A: %v", s, err)
			return
		}
		r.record(resp.GetDeliveries(), resp.GetReportTruncated())
	}
}

// record keeps a report's deliveries; a truncated report would hide some, so it fails the test.
func (r *xrRun) record(ds []*historyv1.MessageDelivery, truncated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if truncated {
		r.errs = append(r.errs, "a collect report was truncated: the test cannot account for what it left out")
	}
	for _, d := range ds {
		var x xrDelivery
		x.reached = d.GetReachedOwnerIds()
		if int(d.GetReachedCount()) != len(x.reached) {
			r.errs = append(r.errs, fmt.Sprintf("message %s: reachedCount %d and %d reached owner ids", d.GetMessageId(), d.GetReachedCount(), len(x.reached)))
		}
		for _, dr := range d.GetDrops() {
			x.drops = append(x.drops, xrDrop{rcpt: ledgerRecipient(dr.GetRecipient()), reason: dr.GetReason()})
		}
		r.collected[d.GetMessageId()] = append(r.collected[d.GetMessageId()], x)
	}
}

// ledgerRecipient is a dead letter's recipient as the ledger names it (exchange.LedgerEntry):
// the participant's text, "None" for a broadcast's null.
func ledgerRecipient(v *structpb.Value) string {
	if _, null := v.GetKind().(*structpb.Value_NullValue); null || v == nil {
		return "None"
	}
	s := v.GetStringValue()
	if id, err := uuid.Parse(s); err == nil {
		return id.String()
	}
	return s
}

// reachedBy lists the messages the reports say reached owner, in no order.
func (r *xrRun) reachedBy(owner uuid.UUID) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, ds := range r.collected {
		for _, d := range ds {
			for _, o := range d.reached {
				if o == owner.String() {
					out[id] = true
				}
			}
		}
	}
	return out
}

// popper pops owner's inbox of each sender on one replica until stop; the other replica's popper
// pops the same inboxes at the same time.
func (r *xrRun) popper(ctx context.Context, stop <-chan struct{}, rep string, owner uuid.UUID, senders []uuid.UUID) {
	c := r.client(rep)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		s := senders[i%len(senders)]
		resp, err := c.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: owner.String(), Sender: s.String(), OmitRendered: true})
		if err != nil {
			r.fail("PopMessage %s from %s on %s: %v", owner, s, rep, err)
			return
		}
		if m := resp.GetMessage(); m != nil {
			r.mu.Lock()
			k := xrKey{m.GetId(), owner.String()}
			r.pops[k] = append(r.pops[k], rep)
			r.mu.Unlock()
			if m.GetSender().GetStringValue() != s.String() {
				r.fail("PopMessage %s from %s on %s returned message %s of %s", owner, s, rep, m.GetId(), m.GetSender())
			}
		}
	}
}

// peeker Receives owner's inboxes on B until stop: a peek, which must hand nothing out (the
// ledger's popped entries are exactly the pops).
func (r *xrRun) peeker(ctx context.Context, stop <-chan struct{}, owner uuid.UUID) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := r.b.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: owner.String(), OmitRendered: true}); err != nil {
			r.fail("Receive %s on B: %v", owner, err)
			return
		}
	}
}

// xrGrant is one lease handed out: its attempt and the replica that answered.
type xrGrant struct {
	attempt int
	rep     string
}

// leaser leases owner's messages on one replica until stop, up to 3 at a time, and settles each:
// a Nack (xrNackPercent of them, and every lease of a stubborn message), else an Ack; the other replica's leaser leases the same inboxes
// at the same time, and the poppers pop them. No lease expires (xrVisibility), so every Ack and
// Nack must succeed: a refusal as stale is a message another leaser took while it was held.
func (r *xrRun) leaser(ctx context.Context, stop <-chan struct{}, rep string, owner uuid.UUID, rng *rand.Rand) {
	c := r.client(rep)
	for {
		select {
		case <-stop:
			return
		default:
		}
		resp, err := c.Lease(ctx, &historyv1.LeaseRequest{OwnerId: owner.String(), MaxMessages: int32(1 + rng.IntN(3)), OmitRendered: true})
		if err != nil {
			r.fail("Lease %s on %s: %v", owner, rep, err)
			return
		}
		r.mu.Lock()
		for _, l := range resp.GetLeased() {
			k := xrKey{l.GetMessage().GetId(), owner.String()}
			r.grants[k] = append(r.grants[k], xrGrant{attempt: int(l.GetAttempt()), rep: rep})
		}
		r.mu.Unlock()
		for _, l := range resp.GetLeased() {
			if !r.settle(ctx, c, rep, owner, l, rng.IntN(100) < xrNackPercent || xrStubborn(l.GetMessage().GetId())) {
				return
			}
		}
	}
}

// settle acknowledges or nacks one lease on rep and records the answer; false when the call
// failed (recorded with fail).
func (r *xrRun) settle(ctx context.Context, c historyv1.ExchangeServiceClient, rep string, owner uuid.UUID, l *historyv1.LeasedMessage, nack bool) bool {
	k := xrKey{l.GetMessage().GetId(), owner.String()}
	a := int(l.GetAttempt())
	what := "Ack"
	var err error
	var dead bool
	if nack {
		what = "Nack"
		var nr *historyv1.NackResponse
		if nr, err = c.Nack(ctx, &historyv1.NackRequest{OwnerId: owner.String(), Receipt: l.GetReceipt()}); err == nil {
			dead = nr.GetDeadLettered()
		}
	} else {
		_, err = c.Ack(ctx, &historyv1.AckRequest{OwnerId: owner.String(), Receipt: l.GetReceipt()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case status.Code(err) == codes.FailedPrecondition && reasonOf(err) == historyv1.ErrorReason_ERROR_REASON_LEASE_STALE.String():
		r.stale = append(r.stale, fmt.Sprintf("%s of message %s, attempt %d, on %s: refused as stale (%v)", what, k.msg, a, rep, err))
	case err != nil:
		r.errs = append(r.errs, fmt.Sprintf("%s of message %s at %s on %s: %v", what, k.msg, owner, rep, err))
		return false
	case nack:
		r.nacks[k] = append(r.nacks[k], a)
		if dead {
			r.nackDead[k] = a
		}
	default:
		r.acks[k] = append(r.acks[k], a)
	}
	return true
}

// leasesOn counts the leases handed out on rep.
func (r *xrRun) leasesOn(rep string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countAll(r.grants, func(g xrGrant) bool { return g.rep == rep })
}

// popsOn counts the messages PopMessage returned on rep.
func (r *xrRun) popsOn(rep string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countAll(r.pops, func(x string) bool { return x == rep })
}

// countAll counts the values across m's lists for which match is true.
func countAll[T any](m map[xrKey][]T, match func(T) bool) int {
	n := 0
	for _, vs := range m {
		for _, v := range vs {
			if match(v) {
				n++
			}
		}
	}
	return n
}

// unregister unregisters owner on a replica and records what its Flow returned.
func (r *xrRun) unregister(ctx context.Context, rep string, owner uuid.UUID) {
	r.mu.Lock()
	r.leaving[owner] = true
	r.mu.Unlock()
	resp, err := r.client(rep).Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: owner.String(), OmitRendered: true})
	if err != nil {
		r.fail("Unregister %s on %s: %v", owner, rep, err)
		return
	}
	f := resp.GetFlow()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range f.GetOutbox() {
		r.returned[xrKey{m.GetId(), ""}] = true
	}
	for _, in := range f.GetInboxes() {
		for _, m := range in.GetMessages() {
			r.returned[xrKey{m.GetId(), owner.String()}] = true
		}
	}
	for _, dl := range f.GetDeadLetters() {
		r.returned[xrKey{dl.GetMessage().GetId(), ledgerRecipient(dl.GetRecipient())}] = true
	}
	r.evicted[owner] += f.GetDeadLettersEvicted()
}

// xrFinal is what the live owners hold once the load has stopped, read on B.
type xrFinal struct {
	inbox   map[xrKey]bool                       // Receive: (message, owner)
	dead    map[xrKey]historyv1.DeadLetterReason // ListDeadLetters: (message, recipient) of a live sender
	evicted map[uuid.UUID]uint64                 // ListDeadLetters' evicted_count
	queued  int64                                // ListOwners' queued counts: 0 after the final CollectAll
}

// readFinal reads every live owner's inboxes and dead letters on B, paging to the end.
func (r *xrRun) readFinal(ctx context.Context, live []uuid.UUID) xrFinal {
	t := r.t
	f := xrFinal{inbox: map[xrKey]bool{}, dead: map[xrKey]historyv1.DeadLetterReason{}, evicted: map[uuid.UUID]uint64{}}
	for _, o := range live {
		for token := ""; ; {
			page, err := r.b.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: o.String(), PageSize: 1000, PageToken: token, OmitRendered: true})
			if err != nil {
				t.Fatalf("Receive %s on B: %v", o, err)
			}
			for _, m := range page.GetMessages() {
				f.inbox[xrKey{m.GetId(), o.String()}] = true
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		for token := ""; ; {
			page, err := r.b.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: o.String(), PageSize: 1000, PageToken: token, OmitRendered: true})
			if err != nil {
				t.Fatalf("ListDeadLetters %s on B: %v", o, err)
			}
			for _, dl := range page.GetDeadLetters() {
				f.dead[xrKey{dl.GetMessage().GetId(), ledgerRecipient(dl.GetRecipient())}] = dl.GetReason()
			}
			f.evicted[o] = page.GetEvictedCount()
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
	}
	owners, err := r.b.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: 1000})
	if err != nil {
		t.Fatalf("ListOwners on B: %v", err)
	}
	for _, o := range owners.GetOwners() {
		f.queued += o.GetQueuedCount()
	}
	return f
}
