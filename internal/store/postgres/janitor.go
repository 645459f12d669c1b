package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// deadGrace is how long a deleted incarnation's events stay for the
// subscribers of every replica to read through BRANCH_DELETED; any
// replica's janitor deletes them after it. A var: tests lower it.
var deadGrace = 10 * time.Minute

// janitorInterval is how often the janitor runs.
var janitorInterval = time.Minute

// deadMark is the store_meta key that marks a deleted incarnation whose
// events are still to delete; its value is the delete's unix nanoseconds.
func deadMark(inc uuid.UUID) string { return "dead-incarnation:" + inc.String() }

// runJanitor deletes the events of incarnations deleted more than
// deadGrace ago, and the request records past the window (a write forgets
// its own scope's only). Any replica may do it; two doing it at once
// delete the same rows once. Owner: the Store; stopped by Close.
func (s *Store) runJanitor() {
	defer s.wg.Done()
	t := time.NewTicker(janitorInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.ready.Load() {
			s.cleanUp(s.ctx) //nolint:errcheck // the next run retries
		}
	}
}

// cleanUp is one run of the janitor.
func (s *Store) cleanUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	now := s.now()
	if _, err := s.pool.Exec(ctx, qForgetExpired, now.UnixNano()-int64(s.cfg.RequestTTL)); err != nil {
		return s.fault(ctx, err)
	}
	rows, err := s.pool.Query(ctx, qDeadMarks)
	if err != nil {
		return s.fault(ctx, err)
	}
	var dead []uuid.UUID
	for rows.Next() {
		var key, value string
		if err := rows.Scan(&key, &value); err != nil {
			rows.Close()
			return err
		}
		at, err := strconv.ParseInt(value, 10, 64)
		if err == nil && now.Sub(time.Unix(0, at)) < deadGrace {
			continue
		}
		if inc, err := uuid.Parse(strings.TrimPrefix(key, "dead-incarnation:")); err == nil {
			dead = append(dead, inc)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.fault(ctx, err)
	}
	for _, inc := range dead {
		b := &pgxBatch{}
		b.Queue(qDeleteEvents, inc)
		b.Queue(qUnmarkDead, deadMark(inc))
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return s.fault(ctx, err)
		}
	}
	return nil
}
