package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// Issue 16's faults, sorted as the SQLite engine sorts its own
// (sqlite/faults.go) into the store's storage sentinels:
//
//   - the connection lost or refused, the server shutting down (57P01..
//     57P03), a connection exception (class 08), too many connections
//     (53300), a COMMIT whose outcome is unknown: store.ErrStorageUnavailable
//     (UNAVAILABLE: the client retries with its request_id and writes once);
//   - statement_timeout (57014) is store.ErrStorageUnavailable too: the
//     statement was cancelled and its transaction rolled back, so a retry
//     is safe, and the server is busy rather than the request wrong;
//   - a failover and the server's trouble (issue 16 review 7): 25006 (a
//     read-only standby now), 57P04 (the database dropped), 58030 (an I/O
//     error) mark the health unusable until the prober finds a writable
//     primary; 53200 (out of memory), 55P03 (a lock timeout), and a
//     deadlock or serialization failure left after runTx's retries
//     (40P01, 40001) do not, since the server is fine: all are
//     store.ErrStorageUnavailable, retryable, never INTERNAL;
//   - disk full (53100): store.ErrStorageFull;
//   - data corrupted (XX001, XX002): store.ErrStorageDamaged;
//   - a text PostgreSQL cannot store (22021, character_not_in_repertoire: U+0000
//     in a TEXT value): an input error (unstorableTextError, INVALID_ARGUMENT),
//     not a fault. historyd refuses NUL where it keeps a client's text in a
//     column (docs/decisions/0012 row 24), so this is the backstop for a
//     field those checks miss: the statement was refused and its transaction
//     rolled back, nothing is damaged, and a retry of the same value fails
//     the same way, so neither INTERNAL nor a storage fault fits. The cause
//     still reaches the call's log line (LogCause), so a text historyd itself
//     wrote wrongly would not go unseen.

// StorageError is a fault of the database server: its Err is one of the
// store's storage sentinels, Cause is pgx's error (for the server's log).
type StorageError struct {
	Target string // host:port/dbname
	Err    error
	Cause  error
	// AtCommit: the connection failed at COMMIT, so the write may or may
	// not have been applied.
	AtCommit bool
	// Refused: the database's schema cannot be served (too new, or
	// pending with NoAutoMigrate); no retry mends it.
	Refused bool
	// Connecting: the server has not been reached yet since the start.
	Connecting bool
}

func (e *StorageError) Error() string {
	// The message reaches every client: it names Target and a short cause,
	// never pgconn's text, which carries the user, the database and the
	// addresses dialled (issue 16 review 6); LogCause has it all.
	switch {
	case e.Refused:
		if pgFault(e.Cause) {
			return fmt.Sprintf("PostgreSQL at %s refused the connection (%s)", e.Target, shortCause(e.Cause))
		}
		return fmt.Sprintf("PostgreSQL at %s: %v", e.Target, e.Cause) // the schema's: historyd's own words
	case e.Connecting:
		return fmt.Sprintf("PostgreSQL at %s unreachable (%s); retrying", e.Target, shortCause(e.Cause))
	case e.Err == store.ErrStorageFull:
		return fmt.Sprintf("PostgreSQL at %s is out of disk space; nothing was changed", e.Target)
	case e.Err == store.ErrStorageDamaged:
		return fmt.Sprintf("PostgreSQL at %s reports damaged data; the server's log says where, and an operator must restore it", e.Target)
	case e.AtCommit:
		return fmt.Sprintf("PostgreSQL at %s: the connection failed while committing: the write may or may not have been applied; retry with the same request_id", e.Target)
	}
	return fmt.Sprintf("PostgreSQL at %s is unavailable (%s); retry with backoff (a write with the same request_id)", e.Target, shortCause(e.Cause))
}

// shortCause words a cause without the server's internals.
func shortCause(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if w, ok := sqlstateWords[pe.Code]; ok {
			return w + " (SQLSTATE " + pe.Code + ")"
		}
		return "SQLSTATE " + pe.Code
	}
	var (
		ne  net.Error
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dns):
		return "host not found"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, new(*pgconn.ConnectError)):
		return "connection failed"
	}
	return "connection lost"
}

// sqlstateWords names the SQLSTATEs a client may meet in a message.
var sqlstateWords = map[string]string{
	"57014": "statement timeout",
	"25006": "read-only: a standby",
	"57P01": "server shutting down", "57P02": "server crashed", "57P03": "server starting up",
	"57P04": "database dropped",
	"58030": "I/O error",
	"53200": "out of memory",
	"53300": "too many connections",
	"55P03": "lock not available",
	"40P01": "deadlock",
	"40001": "serialization failure",
	"28P01": "authentication failed", "28000": "authentication failed",
	"3D000": "no such database",
}

// pgFault reports an error of the server or the connection, whose text
// is pgx's (not historyd's own).
func pgFault(err error) bool {
	return errors.As(err, new(*pgconn.PgError)) || errors.As(err, new(*pgconn.ConnectError)) || connectionClass(err)
}

// LogCause returns pgx's error, for the server's log line of the call.
func (e *StorageError) LogCause() error { return e.Cause }

// Unwrap returns the sentinel and pgx's error.
func (e *StorageError) Unwrap() []error { return []error{e.Err, e.Cause} }

// commitError is a COMMIT that failed without the server's answer.
type commitError struct{ err error }

func (e commitError) Error() string { return "postgres: commit: " + e.err.Error() }
func (e commitError) Unwrap() error { return e.err }

// unstorableTextError is a statement PostgreSQL refused for a text it
// cannot store (SQLSTATE 22021): the client's input, never the database's
// trouble (see the list above).
type unstorableTextError struct{ cause error }

func (e *unstorableTextError) Error() string {
	return "invalid input: a text holds U+0000 (NUL), which PostgreSQL cannot store; nothing was written"
}

// Unwrap returns envelope.ErrInvalid (INVALID_ARGUMENT) and pgx's error.
func (e *unstorableTextError) Unwrap() []error { return []error{envelope.ErrInvalid, e.cause} }

// LogCause returns pgx's error, for the server's log line of the call.
func (e *unstorableTextError) LogCause() error { return e.cause }

// unstorableText reports PostgreSQL's refusal of a text it cannot store.
func unstorableText(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22021"
}

// damagedRowError is a stored value historyd wrote and cannot read back.
type damagedRowError struct{ err error }

func (e damagedRowError) Error() string {
	return "a stored row does not decode: " + e.err.Error()
}
func (e damagedRowError) Unwrap() error { return e.err }

// connectionClass reports an error that says the server cannot be reached
// or the connection was lost: the call may succeed on another connection,
// later.
func connectionClass(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, new(commitError)) || pgconn.SafeToRetry(err) ||
		errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "conn closed")
}

// marksUnusable reports a fault after which the Store is unusable until
// the prober reaches a writable primary: the connection class, and a
// failover (25006: the server is a standby now; 57P04: the database was
// dropped) or an I/O error of the server (58030).
func marksUnusable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "25006" || pe.Code == "57P04" || pe.Code == "58030") {
		return true
	}
	return connectionClass(err)
}

// storageClass returns the storage sentinel err belongs to, or nil.
func storageClass(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100":
			return store.ErrStorageFull
		case "XX001", "XX002":
			return store.ErrStorageDamaged
		case "57014", "25006", "57P04", "58030", "53200", "55P03", "40P01", "40001":
			return store.ErrStorageUnavailable
		}
	}
	if errors.As(err, new(damagedRowError)) {
		return store.ErrStorageDamaged
	}
	if connectionClass(err) {
		return store.ErrStorageUnavailable
	}
	return nil
}

// fault sorts a call's error: a storage fault becomes a *StorageError; a
// lost connection marks the Store unusable until the prober reaches the
// server again. The caller's own cancellation is returned as it is.
func (s *Store) fault(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	if errors.As(err, new(*StorageError)) {
		return err
	}
	if unstorableText(err) {
		return &unstorableTextError{cause: err}
	}
	class := storageClass(err)
	if class == nil {
		return err
	}
	se := &StorageError{Target: s.target, Err: class, Cause: err, AtCommit: errors.As(err, new(commitError))}
	if class == store.ErrStorageUnavailable && marksUnusable(err) {
		s.health.set(se)
	}
	return se
}

// unreachable is the error of the calls (and Health) while the server has
// not been reached.
func (s *Store) unreachable(cause error) *StorageError {
	return &StorageError{Target: s.target, Err: store.ErrStorageUnavailable, Cause: cause, Connecting: true}
}
