package exchangetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// Shape of the conservation run (issue 6 acceptance, issue 17 "conservation everywhere"), scaled
// so that every engine runs it in seconds under -race: consSenders workers send consPerSender x
// Capabilities.Scale messages each, while the other workers collect, collect all, receive, pop and
// unregister/re-register until the senders are done.
const (
	consSenders   = 8
	consPerSender = 40
	consOwners    = 24
	consStable    = 16 // owners 0..15 never unregister; 16..23 leave and come back
	// consMaxDeadLetters is a bound no run reaches, so nothing is evicted and every drop is found.
	consMaxDeadLetters = 1 << 30
)

// consLog is what one worker goroutine saw; the logs are merged after the run.
type consLog struct {
	sent     []*envelope.Message
	reports  []timedReport
	popped   []ownedMsg
	returned []*exchange.Snapshot // Unregister results
	errs     []error
}

// timedReport is a collect's report with the logical-clock window in which the collect ran.
type timedReport struct {
	*exchange.Report
	from, to uint64
}

// span is the logical-clock window of one Register or Unregister call.
type span struct{ from, to uint64 }

// membership is the test's own record of when the volatile owners were registered, kept by the one
// worker that unregisters and registers them, independently of what the Service reports: owner o
// joined at joins[o][0] (before the run), left during leaves[o][0], joined again during
// joins[o][1], and so on.
type membership struct {
	joins, leaves map[uuid.UUID][]span
}

// registeredThroughout reports whether o was certainly registered during the whole window.
func (m membership) registeredThroughout(o uuid.UUID, from, to uint64) bool {
	joins, leaves := m.joins[o], m.leaves[o]
	i := lastBefore(joins, from)
	return i >= 0 && (i >= len(leaves) || leaves[i].from > to)
}

// absentThroughout reports whether o was certainly not registered during the whole window.
func (m membership) absentThroughout(o uuid.UUID, from, to uint64) bool {
	joins, leaves := m.joins[o], m.leaves[o]
	i := lastBefore(leaves, from)
	return i >= 0 && (i+1 >= len(joins) || joins[i+1].from > to)
}

// lastBefore returns the index of the last span that ended before t, or -1; spans are in order.
func lastBefore(spans []span, t uint64) int {
	i, _ := slices.BinarySearchFunc(spans, t, func(s span, t uint64) int {
		switch {
		case s.to < t:
			return -1
		case s.to > t:
			return 1
		}
		return 0
	})
	return i - 1
}

type ownedMsg struct {
	owner uuid.UUID
	msg   *envelope.Message
}

// testConservation runs senders against owners with concurrent send, collect, collect_all,
// receive, pop and unregister/re-register, with limits set so that nothing is evicted, and then
// checks that every sent message is, for each recipient it was addressed to (for a broadcast, the
// owners registered when it was collected), delivered exactly once (popped, or held in an inbox
// that Unregister returned), dead-lettered with a reason, or returned by Unregister from the
// sender's outbox; nothing is duplicated or lost (issue 6 acceptance; issue 17 "conservation
// everywhere"; ADR-0006 D5). Who a message was addressed to is checked against the test's own
// record of who was registered while its collect ran (membership). When the engine keeps a ledger
// (exchange.Ledgered) it must say the same, one entry per (message, recipient).
func testConservation(t *testing.T, f Factory, caps Capabilities) {
	x := newFx(t, f, Options{MaxOutbox: NoBound, MaxInbox: NoBound, MaxDeadLetters: consMaxDeadLetters})
	svc := x.svc
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	owners := make([]uuid.UUID, consOwners)
	for i := range owners {
		owners[i] = uuid.New()
		x.register(owners[i])
	}
	unknown := []uuid.UUID{uuid.New(), uuid.New()}
	// clock orders the workers' calls: each call is stamped before it starts and after it returns.
	var clock atomic.Uint64
	members := membership{joins: map[uuid.UUID][]span{}, leaves: map[uuid.UUID][]span{}}
	for _, o := range owners[consStable:] {
		members.joins[o] = []span{{0, 0}}
	}
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}

	var senders, others sync.WaitGroup
	var logs []*consLog
	worker := func(wg *sync.WaitGroup, f func(l *consLog, r *rand.Rand)) {
		l := &consLog{}
		logs = append(logs, l)
		seed := uint64(len(logs))
		wg.Go(func() { f(l, rand.New(rand.NewPCG(seed, seed*7919))) })
	}
	pick := func(r *rand.Rand) uuid.UUID { return owners[r.IntN(consOwners)] }

	for range consSenders {
		worker(&senders, func(l *consLog, r *rand.Rand) {
			for n := range consPerSender * caps.Scale {
				var rcpt envelope.Participant
				switch k := r.IntN(100); {
				case k < 75:
					rcpt = to(pick(r))
				case k < 80:
					rcpt = envelope.None()
				case k < 88:
					rcpt = to(unknown[r.IntN(len(unknown))])
				case k < 92:
					rcpt = envelope.ParseParticipant("bob")
				case k < 96:
					rcpt = envelope.ParseParticipant("user")
				default:
					rcpt = envelope.Unset()
				}
				m, err := svc.Send(c, exchange.SendRequest{Sender: pick(r), Recipient: rcpt, Content: text(fmt.Sprint(n))})
				switch {
				case err == nil:
					l.sent = append(l.sent, m)
				case !errors.Is(err, exchange.ErrOwnerNotRegistered): // a leaving sender is the only failure
					l.errs = append(l.errs, err)
				}
			}
		})
	}
	for range 2 {
		worker(&others, func(l *consLog, r *rand.Rand) {
			for !stopped() {
				from := clock.Add(1)
				rep, err := svc.Collect(c, pick(r), exchange.ReportOptions{OwnerIDs: true})
				to := clock.Add(1)
				if err == nil {
					l.reports = append(l.reports, timedReport{rep, from, to})
				} else if !errors.Is(err, exchange.ErrOwnerNotRegistered) {
					l.errs = append(l.errs, err)
				}
			}
		})
	}
	worker(&others, func(l *consLog, _ *rand.Rand) {
		for !stopped() {
			reps, err := collectAllTimed(c, svc, &clock)
			l.reports = append(l.reports, reps...)
			if err != nil {
				l.errs = append(l.errs, err)
			}
		}
	})
	worker(&others, func(l *consLog, r *rand.Rand) {
		for !stopped() {
			p, err := svc.ReceivePage(c, pick(r), nil, exchange.Cursor{}, 64)
			if err != nil {
				l.errs = append(l.errs, err)
				continue
			}
			seen := map[uuid.UUID]bool{}
			for _, m := range p.Messages {
				if seen[m.ID] {
					l.errs = append(l.errs, fmt.Errorf("Receive returned %s twice", m.ID))
				}
				seen[m.ID] = true
			}
		}
	})
	for range 2 {
		worker(&others, func(l *consLog, r *rand.Rand) {
			for !stopped() {
				owner := pick(r)
				m, ok, err := svc.PopIf(c, owner, pick(r), nil)
				if err != nil {
					l.errs = append(l.errs, err)
				} else if ok {
					l.popped = append(l.popped, ownedMsg{owner, m})
				}
			}
		})
	}
	worker(&others, func(l *consLog, r *rand.Rand) {
		for !stopped() {
			o := owners[consStable+r.IntN(consOwners-consStable)]
			from := clock.Add(1)
			s, ok, err := svc.UnregisterIf(c, o, nil)
			members.leaves[o] = append(members.leaves[o], span{from, clock.Add(1)})
			if err != nil || !ok {
				l.errs = append(l.errs, fmt.Errorf("volatile owner %s: Unregister = %v, %v", o, ok, err))
				return
			}
			l.returned = append(l.returned, s)
			from = clock.Add(1)
			_, err = svc.Register(c, o)
			members.joins[o] = append(members.joins[o], span{from, clock.Add(1)})
			if err != nil {
				l.errs = append(l.errs, err)
				return
			}
		}
	})

	senders.Wait() // the run's length is the senders' work
	close(stop)
	others.Wait()

	reps, err := collectAllTimed(c, svc, &clock)
	final := &consLog{reports: reps}
	if err != nil {
		final.errs = append(final.errs, err)
	}
	for _, o := range owners {
		s, ok, err := svc.UnregisterIf(c, o, nil)
		if err != nil || !ok {
			t.Fatalf("owner %s not registered at the end: %v, %v", o, ok, err)
		}
		final.returned = append(final.returned, s)
	}
	logs = append(logs, final)
	want := checkConservation(t, logs, owners[:consStable], members)
	if _, ok := svc.(exchange.Ledgered); ok && !t.Failed() {
		checkLedger(t, svc.(exchange.Ledgered), want)
	}
}

// collectAllTimed runs CollectAll and stamps each report with the window of the whole call.
func collectAllTimed(c context.Context, svc exchange.Service, clock *atomic.Uint64) ([]timedReport, error) {
	from := clock.Add(1)
	all, err := svc.CollectAll(c, exchange.ReportOptions{OwnerIDs: true})
	to := clock.Add(1)
	if all == nil {
		return nil, err
	}
	out := make([]timedReport, len(all.Reports))
	for i, rep := range all.Reports {
		out[i] = timedReport{rep, from, to}
	}
	return out, err
}

// consKey identifies one (message, recipient) obligation.
type consKey struct {
	id        uuid.UUID // the message id
	recipient string    // an owner's UUID text, or the participant's JSON for a drop
	reason    exchange.Reason
}

// ledgerExpect is where the run's logs say each delivery ended up, for checkLedger: popped or
// returned for each (message, owner reached); returned for each outbox entry (recipient "") and
// for each dead letter, counted per message (the ledger's words for a dead letter's recipient are
// the engine's).
type ledgerExpect struct {
	exact        map[[2]string]exchange.LedgerState
	deadReturned map[uuid.UUID]int
}

func checkConservation(t *testing.T, logs []*consLog, stable []uuid.UUID, members membership) ledgerExpect {
	t.Helper()
	want := ledgerExpect{exact: map[[2]string]exchange.LedgerState{}, deadReturned: map[uuid.UUID]int{}}
	sent := map[uuid.UUID]*envelope.Message{}
	accounted := map[uuid.UUID]int{} // collected, or returned in an outbox
	owed := map[consKey]int{}        // from the reports: deliveries and drops
	found := map[consKey]int{}       // from the sinks: pops, returned inboxes, dead letters
	var evicted uint64
	checked := 0 // (message, volatile owner) pairs checked against the membership record
	for _, l := range logs {
		for _, err := range l.errs {
			t.Error(err)
		}
		for _, m := range l.sent {
			if sent[m.ID] != nil {
				t.Fatalf("message id %s sent twice", m.ID)
			}
			sent[m.ID] = m
		}
	}
	for _, l := range logs {
		for _, rep := range l.reports {
			for _, d := range rep.Deliveries {
				accounted[d.Message.ID]++
				checkAddressing(t, rep.Owner, d, stable)
				checked += checkMembership(t, rep, d, members)
				for _, o := range d.Reached {
					owed[consKey{d.Message.ID, o.String(), 0}]++
				}
				for _, dr := range d.Dropped {
					owed[consKey{d.Message.ID, dr.Recipient.JSON().String(), dr.Reason}]++
				}
			}
		}
		for _, p := range l.popped {
			found[consKey{p.msg.ID, p.owner.String(), 0}]++
			want.exact[[2]string{p.msg.ID.String(), p.owner.String()}] = exchange.LedgerPopped
		}
		for _, s := range l.returned {
			for _, m := range s.Outbox {
				accounted[m.ID]++
				want.exact[[2]string{m.ID.String(), ""}] = exchange.LedgerReturned
			}
			for _, in := range s.Inboxes {
				for _, m := range in.Messages {
					if id, _ := m.Sender.ID(); id != in.Sender {
						t.Errorf("message %s from %s sits in the inbox of %s", m.ID, id, in.Sender)
					}
					found[consKey{m.ID, s.Owner.String(), 0}]++
					want.exact[[2]string{m.ID.String(), s.Owner.String()}] = exchange.LedgerReturned
				}
			}
			for _, dl := range s.DeadLetters {
				if id, _ := dl.Message.Sender.ID(); id != s.Owner {
					t.Errorf("dead letter %s of %s kept by %s", dl.Message.ID, id, s.Owner)
				}
				found[consKey{dl.Message.ID, dl.Recipient.JSON().String(), dl.Reason}]++
				want.deadReturned[dl.Message.ID]++
			}
			evicted += s.DeadLettersEvicted
		}
	}
	if evicted != 0 {
		t.Errorf("%d dead letters evicted with no bound reached", evicted)
	}
	problems := 0
	report := func(format string, args ...any) {
		if problems++; problems <= 10 {
			t.Errorf(format, args...)
		}
	}
	for id := range sent {
		if accounted[id] != 1 {
			report("sent message %s collected or returned %d times, want exactly once", id, accounted[id])
		}
	}
	for id, n := range accounted {
		if sent[id] == nil {
			report("message %s accounted %d times but never sent", id, n)
		}
	}
	for k, n := range owed {
		if found[k] != n || n != 1 {
			report("%+v: owed %d by the reports, found %d in pops, inboxes and dead letters", k, n, found[k])
		}
	}
	for k, n := range found {
		if owed[k] == 0 {
			report("%+v found %d times but no report accounts for it", k, n)
		}
	}
	if problems > 0 {
		t.Fatalf("%d conservation problems", problems)
	}
	deliveries := 0
	for k := range owed {
		if k.reason == 0 {
			deliveries++
		}
	}
	t.Logf("%d messages sent; %d deliveries and %d drops accounted for exactly once; %d addressings checked against the membership record",
		len(sent), deliveries, len(owed)-deliveries, checked)
	if len(sent) == 0 || deliveries == 0 {
		t.Error("the run sent or delivered nothing")
	}
	return want
}

// checkLedger checks the engine's ledger after every owner left: each (message, recipient) has
// exactly one entry, in the terminal state the run's logs say (issue 17: "each delivery of an
// acknowledged Send is ... in exactly one state").
func checkLedger(t *testing.T, l exchange.Ledgered, want ledgerExpect) {
	t.Helper()
	entries, err := l.Ledger(ctx(t))
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	matched := map[[2]string]bool{}
	problems := 0
	report := func(format string, args ...any) {
		if problems++; problems <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, e := range entries {
		k := [2]string{e.Message.String(), e.Recipient}
		if st, ok := want.exact[k]; ok && !matched[k] {
			matched[k] = true
			if e.State != st {
				report("ledger: %s for %q is %s, want %s", e.Message, e.Recipient, e.State, st)
			}
			continue
		}
		if e.State == exchange.LedgerReturned && want.deadReturned[e.Message] > 0 {
			want.deadReturned[e.Message]--
			continue
		}
		report("ledger entry %+v accounts for nothing the run saw (or twice)", e)
	}
	for k := range want.exact {
		if !matched[k] {
			report("ledger has no entry for %s to %q", k[0], k[1])
		}
	}
	for id, n := range want.deadReturned {
		if n > 0 {
			report("ledger lacks %d returned dead letters of %s", n, id)
		}
	}
	t.Logf("ledger: %d entries, all accounted for", len(entries))
}

// checkMembership checks one delivery of a timed report against the test's own membership record
// of the volatile owners: an owner registered throughout the collect must have been reached; one
// absent throughout must not have been. It returns the number of (message, owner) pairs decided.
func checkMembership(t *testing.T, rep timedReport, d exchange.Delivery, members membership) int {
	t.Helper()
	m := d.Message
	var candidates []uuid.UUID
	if m.IsBroadcast() {
		for o := range members.joins {
			if o != rep.Owner {
				candidates = append(candidates, o)
			}
		}
	} else if id, ok := m.Recipient.ID(); ok && members.joins[id] != nil {
		candidates = append(candidates, id)
	}
	checked := 0
	for _, o := range candidates {
		switch {
		case members.registeredThroughout(o, rep.from, rep.to):
			checked++
			if !slices.Contains(d.Reached, o) {
				t.Errorf("message %s of %s did not reach %s, registered throughout its collect (reached %v, dropped %+v)",
					m.ID, rep.Owner, o, d.Reached, d.Dropped)
			}
		case members.absentThroughout(o, rep.from, rep.to):
			checked++
			if slices.Contains(d.Reached, o) {
				t.Errorf("message %s of %s reached %s, which was not registered during its collect", m.ID, rep.Owner, o)
			}
			for _, dr := range d.Dropped {
				if id, _ := dr.Recipient.ID(); m.IsBroadcast() && id == o {
					t.Errorf("broadcast %s of %s names %s, which was not registered during its collect", m.ID, rep.Owner, o)
				}
			}
		}
	}
	return checked
}

// checkAddressing checks one delivery report against the message's recipient: a direct message has
// exactly one outcome, for its recipient, with the reason its kind allows; a broadcast reaches or
// drops each other owner at most once, never the sender, and always reaches the owners that never
// leave (limits are off, so nothing is full).
func checkAddressing(t *testing.T, sender uuid.UUID, d exchange.Delivery, stable []uuid.UUID) {
	t.Helper()
	m := d.Message
	if id, _ := m.Sender.ID(); id != sender {
		t.Errorf("report of %s holds a message from %s", sender, id)
	}
	if !m.IsBroadcast() {
		n := len(d.Reached) + len(d.Dropped)
		if n != 1 {
			t.Errorf("direct message %s has %d outcomes", m.ID, n)
			return
		}
		if len(d.Dropped) == 1 {
			dr := d.Dropped[0]
			if !dr.Recipient.Equal(m.Recipient) {
				t.Errorf("drop for %v, message is for %v", dr.Recipient, m.Recipient)
			}
			if dr.Reason == exchange.ReasonInboxFull || dr.Reason == exchange.ReasonNoRecipients {
				t.Errorf("direct message %s dropped as %s", m.ID, dr.Reason)
			}
			if id, ok := m.Recipient.ID(); ok && slices.Contains(stable, id) {
				t.Errorf("message %s to an owner that never left was dropped: %s", m.ID, dr.Reason)
			}
		} else if id, _ := m.Recipient.ID(); d.Reached[0] != id {
			t.Errorf("message for %s reached %s", id, d.Reached[0])
		}
		return
	}
	seen := map[uuid.UUID]bool{}
	for _, o := range d.Reached {
		seen[o] = true
	}
	for _, dr := range d.Dropped {
		id, _ := dr.Recipient.ID()
		if dr.Reason != exchange.ReasonRecipientLeft || seen[id] {
			t.Errorf("broadcast %s: drop %+v", m.ID, dr)
		}
		seen[id] = true
	}
	if len(seen) != len(d.Reached)+len(d.Dropped) || seen[sender] {
		t.Errorf("broadcast %s: an owner twice, or the sender, among %v / %+v", m.ID, d.Reached, d.Dropped)
	}
	for _, o := range stable {
		if o != sender && !slices.Contains(d.Reached, o) {
			t.Errorf("broadcast %s did not reach %s, which never left", m.ID, o)
		}
	}
}
