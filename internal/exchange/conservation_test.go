package exchange

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Shape of the conservation run (issue 6 acceptance).
const (
	consSenders = 16
	consOwners  = 64
	consStable  = 48 // owners 0..47 never unregister; 48..63 leave and come back
	// Each sender sends consSendBurst messages every consSendEvery: at most 16 x 500 messages/s.
	consSendBurst = 1
	consSendEvery = 2 * time.Millisecond
)

// consLog is what one worker goroutine saw; the logs are merged after the run.
type consLog struct {
	sent     []*envelope.Message
	reports  []timedReport
	popped   []ownedMsg
	returned []*Snapshot // Unregister results
	errs     []error
}

// timedReport is a collect's report with the logical-clock window in which the collect ran.
type timedReport struct {
	*Report
	from, to uint64
}

// span is the logical-clock window of one Register or Unregister call.
type span struct{ from, to uint64 }

// membership is the test's own record of when the volatile owners were registered, kept by the one
// worker that unregisters and registers them, independently of what the Exchange reports: owner o
// joined at joins[o][0] (before the run), left during leaves[o][0], joined again during
// joins[o][1], and so on.
type membership struct {
	joins, leaves map[uuid.UUID][]span
}

// registeredThroughout reports whether o was certainly registered during the whole window: its
// last join that ended before the window began is followed by a leave that began after it ended
// (or by none). Only that join can qualify: every earlier one was followed by a leave before it.
func (m membership) registeredThroughout(o uuid.UUID, from, to uint64) bool {
	joins, leaves := m.joins[o], m.leaves[o]
	i := lastBefore(joins, from)
	return i >= 0 && (i >= len(leaves) || leaves[i].from > to)
}

// absentThroughout reports whether o was certainly not registered during the whole window: its
// last leave that ended before the window began is followed by a join that began after it ended
// (or by none).
func (m membership) absentThroughout(o uuid.UUID, from, to uint64) bool {
	joins, leaves := m.joins[o], m.leaves[o]
	i := lastBefore(leaves, from)
	return i >= 0 && (i+1 >= len(joins) || joins[i+1].from > to)
}

// lastBefore returns the index of the last span that ended before t, or -1; spans are in order.
func lastBefore(spans []span, t uint64) int {
	i, _ := slices.BinarySearchFunc(spans, t, func(s span, t uint64) int { return cmpUint(s.to, t) })
	return i - 1
}

type ownedMsg struct {
	owner uuid.UUID
	msg   *envelope.Message
}

// TestConservation runs 16 senders against 64 owners for 10 s (2 s with -short) of concurrent
// send, collect, collect_all, receive, pop and unregister/re-register, with limits set so that
// nothing is evicted, and then checks that every sent message is, for each recipient it was
// addressed to (for a broadcast, the owners registered when it was collected), delivered exactly
// once (popped, or held in an inbox that Unregister returned), dead-lettered with a reason, or
// returned by Unregister from the sender's outbox; nothing is duplicated or lost (issue 6
// acceptance; ADR-0006 D5; docs/design.md#exchange). Who a message was addressed to is not taken on
// the delivery report's word: each report is checked against the test's own record of who was
// registered while its collect ran (membership), so a broadcast that skipped an owner registered
// throughout its collect fails the test.
func TestConservation(t *testing.T) {
	d := 10 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	x := New(WithMaxOutbox(0), WithMaxInbox(0), WithMaxDeadLetters(math.MaxInt))
	defer x.Close()
	owners := make([]uuid.UUID, consOwners)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := x.Register(owners[i]); err != nil {
			t.Fatal(err)
		}
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

	var wg sync.WaitGroup
	var logs []*consLog
	worker := func(f func(l *consLog, r *rand.Rand)) {
		l := &consLog{}
		logs = append(logs, l)
		seed := uint64(len(logs))
		wg.Go(func() { f(l, rand.New(rand.NewPCG(seed, seed*7919))) })
	}
	pick := func(r *rand.Rand) uuid.UUID { return owners[r.IntN(consOwners)] }

	for range consSenders {
		worker(func(l *consLog, r *rand.Rand) {
			// Paced so the run's memory stays in the hundreds of megabytes under -race: the point is
			// the interleaving with the other workers, not the volume.
			pace := time.NewTicker(consSendEvery)
			defer pace.Stop()
			for n := 0; !stopped(); n++ {
				if n%consSendBurst == 0 {
					select {
					case <-pace.C:
					case <-stop:
						return
					}
				}
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
				m, err := x.Send(SendRequest{Sender: pick(r), Recipient: rcpt, Content: text(fmt.Sprint(n))})
				switch {
				case err == nil:
					l.sent = append(l.sent, m)
				case !errors.Is(err, ErrOwnerNotRegistered): // a leaving sender is the only failure
					l.errs = append(l.errs, err)
				}
			}
		})
	}
	for range 3 {
		worker(func(l *consLog, r *rand.Rand) {
			for !stopped() {
				from := clock.Add(1)
				rep, err := x.Collect(pick(r))
				to := clock.Add(1)
				if err == nil {
					l.reports = append(l.reports, timedReport{rep, from, to})
				} else if !errors.Is(err, ErrOwnerNotRegistered) {
					l.errs = append(l.errs, err)
				}
			}
		})
	}
	worker(func(l *consLog, _ *rand.Rand) {
		for !stopped() {
			l.reports = append(l.reports, collectAllTimed(t, x, &clock)...)
		}
	})
	for range 2 {
		worker(func(l *consLog, r *rand.Rand) {
			for !stopped() {
				seen := map[uuid.UUID]bool{}
				for _, m := range x.ReceivePage(pick(r), nil, Cursor{}, 64).Messages {
					if seen[m.ID] {
						l.errs = append(l.errs, fmt.Errorf("Receive returned %s twice", m.ID))
					}
					seen[m.ID] = true
				}
			}
		})
	}
	for range 3 {
		worker(func(l *consLog, r *rand.Rand) {
			for !stopped() {
				owner := pick(r)
				if m, ok := x.Pop(owner, pick(r)); ok {
					l.popped = append(l.popped, ownedMsg{owner, m})
				}
			}
		})
	}
	worker(func(l *consLog, r *rand.Rand) {
		for !stopped() {
			o := owners[consStable+r.IntN(consOwners-consStable)]
			from := clock.Add(1)
			s, ok := x.Unregister(o)
			members.leaves[o] = append(members.leaves[o], span{from, clock.Add(1)})
			if !ok {
				l.errs = append(l.errs, fmt.Errorf("volatile owner %s was not registered", o))
				return
			}
			l.returned = append(l.returned, s)
			from = clock.Add(1)
			_, err := x.Register(o)
			members.joins[o] = append(members.joins[o], span{from, clock.Add(1)})
			if err != nil {
				l.errs = append(l.errs, err)
				return
			}
		}
	})

	timer := time.NewTimer(d)
	<-timer.C // the run's length, not a synchronisation: the workers are joined below
	close(stop)
	wg.Wait()

	final := &consLog{reports: collectAllTimed(t, x, &clock)}
	for _, o := range owners {
		s, ok := x.Unregister(o)
		if !ok {
			t.Fatalf("owner %s not registered at the end", o)
		}
		final.returned = append(final.returned, s)
	}
	logs = append(logs, final)
	checkConservation(t, logs, owners[:consStable], members)
}

// collectAllTimed runs CollectAll and stamps each report with the window of the whole call.
func collectAllTimed(t *testing.T, x *Exchange, clock *atomic.Uint64) []timedReport {
	from := clock.Add(1)
	all, err := x.CollectAll(context.Background(), ReportOptions{OwnerIDs: true})
	to := clock.Add(1)
	if err != nil {
		t.Error(err)
	}
	out := make([]timedReport, len(all.Reports))
	for i, rep := range all.Reports {
		out[i] = timedReport{rep, from, to}
	}
	return out
}

// consKey identifies one (message, recipient) obligation.
type consKey struct {
	id        string // the message id
	recipient string // an owner's UUID text, or the participant's JSON for a drop
	reason    Reason // 0 for a delivery
}

func checkConservation(t *testing.T, logs []*consLog, stable []uuid.UUID, members membership) {
	t.Helper()
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
					owed[consKey{d.Message.ID.String(), o.String(), 0}]++
				}
				for _, dr := range d.Dropped {
					owed[consKey{d.Message.ID.String(), dr.Recipient.JSON().String(), dr.Reason}]++
				}
			}
		}
		for _, p := range l.popped {
			found[consKey{p.msg.ID.String(), p.owner.String(), 0}]++
		}
		for _, s := range l.returned {
			for _, m := range s.Outbox {
				accounted[m.ID]++
			}
			for _, in := range s.Inboxes {
				for _, m := range in.Messages {
					if id, _ := m.Sender.ID(); id != in.Sender {
						t.Errorf("message %s from %s sits in the inbox of %s", m.ID, id, in.Sender)
					}
					found[consKey{m.ID.String(), s.Owner.String(), 0}]++
				}
			}
			for _, dl := range s.DeadLetters {
				if id, _ := dl.Message.Sender.ID(); id != s.Owner {
					t.Errorf("dead letter %s of %s kept by %s", dl.Message.ID, id, s.Owner)
				}
				found[consKey{dl.Message.ID.String(), dl.Recipient.JSON().String(), dl.Reason}]++
			}
			evicted += s.DeadLettersEvicted
		}
	}
	if evicted != 0 {
		t.Errorf("%d dead letters evicted with no bound", evicted)
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
	if checked == 0 {
		t.Error("no report was checked against the membership record")
	}
}

// checkMembership checks one delivery of a timed report against the test's own membership record
// of the volatile owners: an owner registered throughout the collect must have been reached (by a
// broadcast from another owner, or by a message addressed to it); one absent throughout must not
// have been reached. It returns the number of (message, owner) pairs it could decide.
func checkMembership(t *testing.T, rep timedReport, d Delivery, members membership) int {
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
			if !isIn(o, d.Reached) {
				t.Errorf("message %s of %s did not reach %s, registered throughout its collect (reached %v, dropped %+v)",
					m.ID, rep.Owner, o, d.Reached, d.Dropped)
			}
		case members.absentThroughout(o, rep.from, rep.to):
			checked++
			if isIn(o, d.Reached) {
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
func checkAddressing(t *testing.T, sender uuid.UUID, d Delivery, stable []uuid.UUID) {
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
			if dr.Reason == ReasonInboxFull || dr.Reason == ReasonNoRecipients {
				t.Errorf("direct message %s dropped as %s", m.ID, dr.Reason)
			}
			if id, ok := m.Recipient.ID(); ok && isIn(id, stable) {
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
		if dr.Reason != ReasonRecipientLeft || seen[id] {
			t.Errorf("broadcast %s: drop %+v", m.ID, dr)
		}
		seen[id] = true
	}
	if len(seen) != len(d.Reached)+len(d.Dropped) || seen[sender] {
		t.Errorf("broadcast %s: an owner twice, or the sender, among %v / %+v", m.ID, d.Reached, d.Dropped)
	}
	for _, o := range stable {
		if o != sender && !isIn(o, d.Reached) {
			t.Errorf("broadcast %s did not reach %s, which never left", m.ID, o)
		}
	}
}

func isIn(id uuid.UUID, ids []uuid.UUID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
