package exchange

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
	reports  []*Report
	popped   []ownedMsg
	returned []*Snapshot // Unregister results
	errs     []error
}

type ownedMsg struct {
	owner uuid.UUID
	msg   *envelope.Message
}

// TestConservation runs 16 senders against 64 owners for 10 s (2 s with -short) of concurrent
// send, collect, collect_all, receive, pop and unregister/re-register, with limits set so that
// nothing is evicted, and then checks that every sent message is, for each recipient it was
// addressed to (for a broadcast, the owners registered when it was collected, as its delivery
// report says), delivered exactly once (popped, or held in an inbox that Unregister returned),
// dead-lettered with a reason, or returned by Unregister from the sender's outbox; nothing is
// duplicated or lost (issue 6 acceptance; ADR-0006 D5; DESIGN.md "Exchange").
func TestConservation(t *testing.T) {
	d := 10 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	x := New(WithMaxOutbox(0), WithMaxInbox(0), WithMaxDeadLetters(0))
	defer x.Close()
	owners := make([]uuid.UUID, consOwners)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := x.Register(owners[i]); err != nil {
			t.Fatal(err)
		}
	}
	unknown := []uuid.UUID{uuid.New(), uuid.New()}
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
				if rep, err := x.Collect(pick(r)); err == nil {
					l.reports = append(l.reports, rep)
				} else if !errors.Is(err, ErrOwnerNotRegistered) {
					l.errs = append(l.errs, err)
				}
			}
		})
	}
	worker(func(l *consLog, _ *rand.Rand) {
		for !stopped() {
			l.reports = append(l.reports, x.CollectAll().Reports...)
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
			s, ok := x.Unregister(o)
			if !ok {
				l.errs = append(l.errs, fmt.Errorf("volatile owner %s was not registered", o))
				continue
			}
			l.returned = append(l.returned, s)
			if _, err := x.Register(o); err != nil {
				l.errs = append(l.errs, err)
			}
		}
	})

	timer := time.NewTimer(d)
	<-timer.C // the run's length, not a synchronisation: the workers are joined below
	close(stop)
	wg.Wait()

	final := &consLog{reports: x.CollectAll().Reports}
	for _, o := range owners {
		s, ok := x.Unregister(o)
		if !ok {
			t.Fatalf("owner %s not registered at the end", o)
		}
		final.returned = append(final.returned, s)
	}
	logs = append(logs, final)
	checkConservation(t, logs, owners[:consStable])
}

// consKey identifies one (message, recipient) obligation.
type consKey struct {
	id        string // the message id
	recipient string // an owner's UUID text, or the participant's JSON for a drop
	reason    Reason // 0 for a delivery
}

func checkConservation(t *testing.T, logs []*consLog, stable []uuid.UUID) {
	t.Helper()
	sent := map[uuid.UUID]*envelope.Message{}
	accounted := map[uuid.UUID]int{} // collected, or returned in an outbox
	owed := map[consKey]int{}        // from the reports: deliveries and drops
	found := map[consKey]int{}       // from the sinks: pops, returned inboxes, dead letters
	var evicted uint64
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
	t.Logf("%d messages sent; %d deliveries and %d drops accounted for exactly once", len(sent), deliveries, len(owed)-deliveries)
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
