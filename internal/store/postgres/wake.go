package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store"
)

// Cross-replica wake-ups (issue 16). PostgreSQL takes a database-wide lock
// at the commit of every transaction that issued NOTIFY, so a write never
// notifies: after its COMMIT it hands (branch, incarnation, head) to this
// replica's notifier, which coalesces them per branch (the highest head)
// and sends them in pg_notify statements of its own, outside any write
// transaction; one notifier per replica takes that lock, not every writer.
// Each replica LISTENs on one dedicated connection; a notification for a
// branch watched here asks the puller to advance its handle (the listener
// never reads the database). A wake-up can be lost (the LISTEN connection
// drops, a notify fails); so on every (re)connect of the listener, and
// every SweepInterval while this replica has handles, one query reads the
// heads of all its watched branches and advances those behind. A lost
// wake-up delays delivery by at most SweepInterval; advance never loses or
// reorders a commit. Idle branches cost nothing, and a replica with no
// handles sends no sweep query.

// channel is the NOTIFY channel.
const channel = "historyd_heads"

// maxPayload keeps a notification under PostgreSQL's 8000-byte limit.
const maxPayload = 7900

// headKey names one branch incarnation.
type headKey struct{ id, inc uuid.UUID }

// wake holds the pending notifications (out) and pulls (in), each a set
// coalesced per branch incarnation, and the channels that wake their
// goroutines.
type wake struct {
	mu     sync.Mutex
	out    map[headKey]uint64
	in     map[headKey]uint64
	outNew chan struct{} // cap 1
	inNew  chan struct{} // cap 1
	sweep  chan struct{} // cap 1: sweep now (the listener reconnected)

	// drop, a test hook, drops notifications sent and received: the
	// sweep alone delivers.
	drop atomic.Bool
	// listening counts the listener's successful LISTENs (tests wait on it).
	listening atomic.Int64

	exchangeWake // the Exchange's wake-ups (exchange_driver.go), guarded by mu
}

func newWake() *wake {
	return &wake{
		out: map[headKey]uint64{}, in: map[headKey]uint64{},
		outNew: make(chan struct{}, 1), inNew: make(chan struct{}, 1), sweep: make(chan struct{}, 1),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// notify queues a local commit's head for the other replicas.
func (w *wake) notify(id, inc uuid.UUID, head uint64) {
	w.mu.Lock()
	k := headKey{id, inc}
	w.out[k] = max(w.out[k], head)
	w.mu.Unlock()
	signal(w.outNew)
}

// pull queues a head for the puller to advance a handle to (0: read the
// branch's head from the database).
func (w *wake) pull(id, inc uuid.UUID, head uint64) {
	w.mu.Lock()
	k := headKey{id, inc}
	if old, ok := w.in[k]; !ok || (old != 0 && head > old) || head == 0 {
		w.in[k] = head
	}
	w.mu.Unlock()
	signal(w.inNew)
}

func (w *wake) take(m *map[headKey]uint64) map[headKey]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := *m
	*m = map[headKey]uint64{}
	return got
}

// payloads writes heads as notifications: "id:incarnation:head" entries
// joined by commas, each payload under maxPayload.
func payloads(heads map[headKey]uint64) []string {
	var (
		out []string
		b   strings.Builder
	)
	for k, head := range heads {
		e := k.id.String() + ":" + k.inc.String() + ":" + strconv.FormatUint(head, 10)
		if b.Len() > 0 && b.Len()+1+len(e) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// parsePayload reads a notification's entries; malformed ones are skipped.
func parsePayload(p string, fn func(id, inc uuid.UUID, head uint64)) {
	for _, e := range strings.Split(p, ",") {
		parts := strings.Split(e, ":")
		if len(parts) != 3 {
			continue
		}
		id, err1 := uuid.Parse(parts[0])
		inc, err2 := uuid.Parse(parts[1])
		head, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			fn(id, inc, head)
		}
	}
}

// runNotifier sends the queued heads, each batch of them after the last
// is sent. A notify that fails is dropped: the sweep makes up for it.
// Owner: the Store; stopped by Close.
func (s *Store) runNotifier() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake.outNew:
		}
		heads := s.wake.take(&s.wake.out)
		owners := s.wake.takeOwners()
		if s.wake.drop.Load() || !s.ready.Load() {
			continue
		}
		for _, p := range payloads(heads) {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			err := s.pool.SendBatch(ctx, notifyBatch(p)).Close()
			cancel()
			if err != nil {
				break
			}
		}
		for _, p := range owners {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			err := s.pool.SendBatch(ctx, notifyExchangeBatch(p)).Close()
			cancel()
			if err != nil {
				break // the Exchange's periodic recheck makes up for it
			}
		}
	}
}

// notifyBatch is one notification in a transaction of its own, committed
// without waiting for the WAL's flush, in one round trip. NOTIFY gives its
// transaction an id, so its COMMIT is a commit record which, with
// synchronous_commit on, waits for an fsync: one per notify, next to the
// writes' own (issue 16 benchmark). A wake-up needs no durability: a
// notification lost with a crash of the server is what the sweep makes
// up for, and the listeners are told at the commit either way.
func notifyBatch(payload string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue("set local synchronous_commit to off")
	b.Queue(qNotify, payload)
	b.Queue("commit")
	return b
}

// runListener holds the LISTEN connection, reconnecting with backoff
// (100 ms doubling to 5 s). Losing it ends this replica's subscribers with
// store.ErrStorageUnavailable (retryable: they resume from their cursors);
// each (re)connect sweeps the watched branches. Owner: the Store; stopped
// by Close.
func (s *Store) runListener() {
	defer s.wg.Done()
	wait := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		if s.ready.Load() {
			conn, err := pgx.ConnectConfig(s.ctx, s.conn)
			if err == nil {
				var schema string
				if _, err = conn.Exec(s.ctx, "LISTEN "+channel+"; LISTEN "+exchangeChannel); err == nil {
					err = conn.QueryRow(s.ctx, qSchema).Scan(&schema)
				}
				if err == nil {
					wait = 100 * time.Millisecond
					s.wake.listening.Add(1)
					signal(s.wake.sweep)
					s.wake.exchangeWoken(schema, nil) // wake-ups may have been lost while not listening
					err = s.listen(conn, schema)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				conn.Close(ctx) //nolint:errcheck // the connection is being dropped
				cancel()
			}
			if s.ctx.Err() != nil {
				return
			}
			if s.wake.listening.Load() > 0 && err != nil {
				s.endAll(&StorageError{Target: s.target, Err: store.ErrStorageUnavailable, Cause: err})
				if connectionClass(err) {
					s.fault(context.Background(), err) //nolint:errcheck // marks the health; the prober follows
				}
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// listen hands each notification's entries for branches watched here to
// the puller, until the connection fails or Close.
func (s *Store) listen(conn *pgx.Conn, schema string) error {
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			return err
		}
		if s.wake.drop.Load() {
			continue
		}
		if n.Channel == exchangeChannel {
			s.wake.exchangeWoken(schema, &n.Payload)
			continue
		}
		parsePayload(n.Payload, func(id, inc uuid.UUID, head uint64) {
			h := s.handleOf(id, inc)
			if h == nil {
				return
			}
			h.mu.RLock()
			behind := h.log.last < head
			h.mu.RUnlock()
			if behind {
				s.wake.pull(id, inc, head)
			}
		})
	}
}

// runPuller advances the handles the listener (or a reader) asked for,
// off the listener's goroutine. Owner: the Store; stopped by Close.
func (s *Store) runPuller() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake.inNew:
		}
		for k, head := range s.wake.take(&s.wake.in) {
			h := s.handleOf(k.id, k.inc)
			if h == nil {
				continue
			}
			if head == 0 {
				ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
				s.sync(ctx, h) //nolint:errcheck // a failure leaves it to the sweep
				cancel()
				continue
			}
			s.advance(h, head, nil) //nolint:errcheck // a failure leaves it to the sweep
		}
	}
}

// runSweeper reads the heads of every watched branch every SweepInterval
// while there are any, and at once when the listener (re)connects. Owner:
// the Store; stopped by Close.
func (s *Store) runSweeper() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.wake.sweep:
		}
		s.sweep()
	}
}

// sweep is ONE query for the heads of all watched branches; the handles
// behind are advanced (a branch gone or of another incarnation: through
// its BRANCH_DELETED).
func (s *Store) sweep() {
	hs := s.allHandles()
	if len(hs) == 0 || !s.ready.Load() {
		return
	}
	ids := make([]uuid.UUID, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	type headRow struct {
		inc  uuid.UUID
		head uint64
	}
	rows, err := s.pool.Query(ctx, qHeads, ids)
	if err != nil {
		s.fault(ctx, err) //nolint:errcheck // marks the health
		return
	}
	found := map[uuid.UUID]headRow{}
	for rows.Next() {
		var (
			id, inc uuid.UUID
			head    int64
		)
		if err := rows.Scan(&id, &inc, &head); err != nil {
			rows.Close()
			return
		}
		found[id] = headRow{inc, uint64(head)}
	}
	rows.Close()
	if rows.Err() != nil {
		return
	}
	for _, h := range hs {
		r, ok := found[h.id]
		if ok && r.inc == h.incarnation {
			h.mu.RLock()
			behind := h.log.last < r.head
			h.mu.RUnlock()
			if !behind {
				continue
			}
		}
		s.catchUp(ctx, h, ok, r.inc, r.head) //nolint:errcheck // the next sweep retries
	}
}
