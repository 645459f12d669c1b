package exchangedb

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// Live subscriptions. The inboxes are in the database, so a subscription is fed from it: each
// knows the owner's registration number and the flow insertion number (seq) it has seen; a
// wake-up for the owner (a local commit that landed mail, another replica's notification, the
// listener's reconnect, or the periodic recheck on a replicated database) makes the one dispatcher
// goroutine read the inbox rows past it, in seq order, and offer them. Deliveries to one owner take
// its row lock, so seqs commit in increasing order and reading "past seq" never skips one: a
// lost wake-up costs latency, never mail. A row popped meanwhile is still offered, as the memory
// engine publishes at delivery.

// dispatchPage bounds the rows one dispatch query reads; more are read in further pages.
const dispatchPage = 512

type sub struct {
	s    *exchange.Subscription
	reg  int64 // the owner's registration number at Subscribe
	last int64 // the last seq offered (or the owner's next_seq at Subscribe)
}

type subscribers struct {
	e    *Engine
	open atomic.Int64 // against WithMaxSubscriptions; freed by the unsubscribe function

	mu      sync.Mutex
	byOwner map[uuid.UUID]map[*sub]struct{}
	pending map[uuid.UUID]struct{}
	all     bool
	busy    bool // the dispatcher took owners to dispatch and is not done with them
	ended   bool // endAll ran (Close)
	kick    chan struct{}
}

func newSubscribers(e *Engine) *subscribers {
	return &subscribers{e: e, byOwner: map[uuid.UUID]map[*sub]struct{}{}, pending: map[uuid.UUID]struct{}{}, kick: make(chan struct{}, 1)}
}

// wake asks the dispatcher to read the inboxes of owners (nil: every subscribed owner). It never
// blocks, so it may run on a commit path or the listener's goroutine.
func (ss *subscribers) wake(owners []uuid.UUID) {
	ss.mu.Lock()
	if owners == nil {
		ss.all = true
	}
	for _, o := range owners {
		if _, ok := ss.byOwner[o]; ok {
			ss.pending[o] = struct{}{}
		}
	}
	ss.mu.Unlock()
	select {
	case ss.kick <- struct{}{}:
	default:
	}
}

// landed is a local commit's wake-up: mail landed in owners' inboxes.
func (ss *subscribers) landed(owners []uuid.UUID) { ss.wake(owners) }

// left is a local Unregister's: the dispatcher offers what landed before and ends the owner's
// subscriptions with ErrOwnerNotRegistered.
func (ss *subscribers) left(owner uuid.UUID) { ss.wake([]uuid.UUID{owner}) }

// run is the dispatcher. Owner: the Engine; stopped by Close.
func (ss *subscribers) run(replicated bool) {
	defer ss.e.wg.Done()
	var tick <-chan time.Time
	if replicated {
		t := time.NewTicker(ss.e.cfg.recheck)
		defer t.Stop()
		tick = t.C
	}
	// A failed dispatch is retried after a backoff (background.go's retryMin to retryMax): on
	// SQLite there is no periodic recheck, and a re-marked owner with nothing to kick the
	// dispatcher would wait for some unrelated wake-up (review R3).
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := retryMin
	for {
		select {
		case <-ss.e.stop:
			return
		case <-ss.kick:
		case <-retry.C:
		case <-tick:
			ss.mu.Lock()
			ss.all = true
			ss.mu.Unlock()
		}
		ss.mu.Lock()
		var owners []uuid.UUID
		if ss.all {
			for o := range ss.byOwner {
				owners = append(owners, o)
			}
		} else {
			for o := range ss.pending {
				owners = append(owners, o)
			}
		}
		ss.all, ss.pending, ss.busy = false, map[uuid.UUID]struct{}{}, true
		ss.mu.Unlock()
		failed := false
		for _, o := range owners {
			ctx, cancel := ss.e.background(10 * time.Second)
			if err := ss.dispatch(ctx, o); err != nil {
				// A fault: retried after the backoff; nothing is lost, the rows stay in the
				// database.
				ss.mu.Lock()
				ss.pending[o] = struct{}{}
				ss.mu.Unlock()
				failed = true
			}
			cancel()
		}
		ss.mu.Lock()
		ss.busy = false
		ss.mu.Unlock()
		if !failed {
			backoff = retryMin
			continue
		}
		retry.Reset(backoff)
		backoff = min(2*backoff, retryMax)
	}
}

// idle reports whether the dispatcher has no wake-up pending and no dispatch running: every
// wake-up given before it was dispatched (the tests' point of synchronisation).
func (ss *subscribers) idle() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !ss.busy && !ss.all && len(ss.pending) == 0
}

// dispatch offers owner's new inbox rows to its subscriptions, and ends them once the owner has
// left (or registered anew: a new flow).
func (ss *subscribers) dispatch(ctx context.Context, owner uuid.UUID) error {
	ss.mu.Lock()
	var subs []*sub
	for s := range ss.byOwner[owner] {
		subs = append(subs, s)
	}
	ss.mu.Unlock()
	if len(subs) == 0 {
		return nil
	}
	regs := map[int64]int64{} // reg -> the lowest last among its subscriptions
	for _, s := range subs {
		if l, ok := regs[s.reg]; !ok || s.last < l {
			regs[s.reg] = s.last
		}
	}
	var cur int64 = -1
	for reg, from := range regs {
		for {
			type landedRow struct {
				seq    int64
				sender uuid.UUID
				m      *envelope.Message
			}
			var got []landedRow
			err := ss.e.d.Read(ctx, func(ctx context.Context, q Querier) error {
				got = got[:0]
				err := q.QueryRow(ctx, `SELECT reg_seq FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, owner.String()).Scan(&cur)
				switch {
				case q.IsNoRows(err):
					cur = 0
				case err != nil:
					return err
				}
				return collect(ctx, q, func(r Rows) error {
					var (
						seq          int64
						sender, body string
					)
					if err := r.Scan(&seq, &sender, &body); err != nil {
						return err
					}
					sid, err := parseUUID(sender)
					if err != nil {
						return err
					}
					m, err := decodeMessage(body)
					if err == nil {
						got = append(got, landedRow{seq, sid, m})
					}
					return err
				}, `SELECT l.seq, l.sender, m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
					WHERE l.tenant = ? AND l.holder = ? AND l.holder_reg = ? AND l.ord > 0 AND l.seq > ? ORDER BY l.seq LIMIT ?`,
					tenant, owner.String(), reg, from, int64(dispatchPage))
			})
			if err != nil {
				return err
			}
			for _, row := range got {
				for _, s := range subs {
					if s.reg == reg && row.seq > s.last {
						s.last = row.seq
						if s.s.Matches(row.sender) {
							// A full buffer, in messages or bytes, ends it
							// (ErrSubscriberTooSlow), unless it is WakeOnly: then the row is
							// dropped, s.last still moves past it, and nothing below ends it for
							// falling behind. Every subscription gets the same decoded message.
							s.s.Offer(row.m)
						}
					}
				}
				from = row.seq
			}
			if len(got) < dispatchPage {
				break
			}
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	set := ss.byOwner[owner]
	for _, s := range subs {
		select {
		case <-s.s.Done():
			delete(set, s)
			continue
		default:
		}
		if s.reg != cur {
			s.s.End(ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered))
			delete(set, s)
		}
	}
	if len(set) == 0 {
		delete(ss.byOwner, owner)
	}
	return nil
}

// endAll ends every subscription with err (Close) and refuses new ones.
func (ss *subscribers) endAll(err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.ended = true
	for _, set := range ss.byOwner {
		for s := range set {
			s.s.End(err)
		}
	}
	ss.byOwner = map[uuid.UUID]map[*sub]struct{}{}
}

// Subscribe starts a live subscription to owner's inboxes (only sender's when not nil), from the
// moment it returns: messages already in the inboxes are Receive's.
func (e *Engine) Subscribe(ctx context.Context, owner uuid.UUID, sender *uuid.UUID, opts ...exchange.SubscribeOption) (*exchange.Subscription, func(), error) {
	if e.closed.Load() {
		return nil, nil, exchange.ErrClosed
	}
	var reg, next int64
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		err := q.QueryRow(ctx, `SELECT reg_seq, next_seq FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, owner.String()).Scan(&reg, &next)
		if q.IsNoRows(err) {
			return errNoRows
		}
		return err
	})
	if err != nil {
		if isNoRowsAny(err) {
			return nil, nil, ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered)
		}
		return nil, nil, err
	}
	ss := e.subs
	if n := ss.open.Add(1); e.set.MaxSubscriptions > 0 && n > int64(e.set.MaxSubscriptions) {
		ss.open.Add(-1)
		return nil, nil, &exchange.TooManySubscriptionsError{Open: int(n - 1), Limit: e.set.MaxSubscriptions}
	}
	s := &sub{s: exchange.NewSubscription(sender, e.set.SubscriberBuffer, e.set.SubscriberBufferBytes, opts...), reg: reg, last: next}
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		ss.open.Add(-1)
		return nil, nil, exchange.ErrClosed
	}
	set := ss.byOwner[owner]
	if set == nil {
		set = map[*sub]struct{}{}
		ss.byOwner[owner] = set
	}
	set[s] = struct{}{}
	ss.mu.Unlock()
	// A wake-up processed between the read and the registration found no subscription: look now.
	ss.wake([]uuid.UUID{owner})
	var once sync.Once
	unsubscribe := func() {
		once.Do(func() {
			ss.open.Add(-1)
			ss.mu.Lock()
			if set := ss.byOwner[owner]; set != nil {
				delete(set, s)
				if len(set) == 0 {
					delete(ss.byOwner, owner)
				}
			}
			ss.mu.Unlock()
			s.s.End(nil)
		})
	}
	return s.s, unsubscribe, nil
}
