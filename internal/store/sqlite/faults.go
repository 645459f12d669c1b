package sqlite

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/historyd/historyd/internal/store"
)

// Issue 15: "Faults, each with a clear error that names the file and loses
// nothing acknowledged". SQLite reports a fault as a result code; this file
// sorts them into the store's two storage sentinels and words them with the
// database file, and the store's health (health.go) follows them.

// StorageError is a fault of the database file: its Err is
// store.ErrStorageFull (the disk is full, or the database reached
// --max-db-bytes), store.ErrStorageUnavailable (an I/O error) or
// store.ErrStorageDamaged (a damaged page or row); Cause is SQLite's error.
// Its message is the client's, worded from the class (the file, the
// limit); SQLite's Cause is for the server log only (LogCause).
type StorageError struct {
	File     string
	MaxBytes int64 // the configured limit, 0 when none
	Err      error
	Cause    error
	// AtCommit: the error came at COMMIT, when the WAL frames may already
	// be written: after an I/O error there, recovery may yet apply them.
	AtCommit bool
}

func (e *StorageError) Error() string {
	// SQLite's error names its internals: the log carries it (LogCause).
	// A cause in historyd's own words (the backup's space check) is the
	// client's too.
	own := ""
	if e.Cause != nil && resultCode(e.Cause) == 0 {
		own = " (" + e.Cause.Error() + ")"
	}
	switch {
	case e.Err == store.ErrStorageFull && e.MaxBytes > 0:
		return fmt.Sprintf("database file %s is full: it reached --max-db-bytes=%d or the disk under it is full%s; nothing was changed", e.File, e.MaxBytes, own)
	case e.Err == store.ErrStorageFull:
		return fmt.Sprintf("database file %s is full: the disk under it has no space left%s; nothing was changed", e.File, own)
	case e.Err == store.ErrStorageDamaged:
		return fmt.Sprintf("database file %s is damaged%s; the server's log says where, and an operator must restore it from a backup", e.File, own)
	case e.AtCommit:
		return fmt.Sprintf("database file %s had an I/O error while committing%s: the write may or may not have been applied; retry with the same request_id", e.File, own)
	}
	return fmt.Sprintf("database file %s had an I/O error%s; retry with backoff (a write with the same request_id)", e.File, own)
}

// LogCause returns SQLite's error, for the server's log line of the call.
func (e *StorageError) LogCause() error { return e.Cause }

// Unwrap returns the sentinel and SQLite's error.
func (e *StorageError) Unwrap() []error { return []error{e.Err, e.Cause} }

// ErrorMetadata returns {file}, and {maxDbBytes, flag} when a limit is set.
func (e *StorageError) ErrorMetadata() map[string]string {
	md := map[string]string{"file": e.File}
	if e.Err == store.ErrStorageFull && e.MaxBytes > 0 {
		md["maxDbBytes"] = strconv.FormatInt(e.MaxBytes, 10)
		md["flag"] = "--max-db-bytes"
	}
	return md
}

// FileError refuses to open a database file that is not historyd's, or not
// a database at all (issue 15: "a corrupt or foreign file (refused at
// start: say what it is)").
type FileError struct {
	File    string
	Problem string // what the file is, as the log line says it
	Err     error  // what SQLite said, or nil
}

func (e *FileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("database file %s %s (%v)", e.File, e.Problem, e.Err)
	}
	return fmt.Sprintf("database file %s %s", e.File, e.Problem)
}

func (e *FileError) Unwrap() error { return e.Err }

// The problems a FileError names.
const (
	problemNotSQLite = "is not an SQLite database"
	problemForeign   = "is an SQLite database but not historyd's: it has tables and no goose_db_version table"
	problemDamaged   = "is damaged"
)

// damagedRowError is a stored value historyd wrote and cannot read back:
// the page held other bytes than it wrote, a damage SQLite does not see in
// an overflow page's content. It is SQLITE_CORRUPT to storageClass.
type damagedRowError struct{ err error }

func (e damagedRowError) Error() string {
	return "database disk image is damaged: a stored row does not decode: " + e.err.Error()
}
func (e damagedRowError) Unwrap() error { return e.err }
func (damagedRowError) Code() int       { return sqlite3.SQLITE_CORRUPT }

// resultCode returns SQLite's primary result code in err's chain, or 0.
func resultCode(err error) int {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code() & 0xff
	}
	return 0
}

// storageClass returns the storage sentinel err belongs to, or nil: a full
// disk or max_page_count (SQLITE_FULL) is store.ErrStorageFull; an I/O
// error, or a file SQLite cannot open, is store.ErrStorageUnavailable; a
// damaged page or row, or a file replaced by one that is not a database,
// is store.ErrStorageDamaged.
func storageClass(err error) error {
	switch resultCode(err) {
	case sqlite3.SQLITE_FULL:
		return store.ErrStorageFull
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
		return store.ErrStorageUnavailable
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return store.ErrStorageDamaged
	}
	return nil
}

// commitError is the error of a batch's COMMIT.
type commitError struct{ err error }

func (e commitError) Error() string { return "sqlite: commit: " + e.err.Error() }
func (e commitError) Unwrap() error { return e.err }

// openError words an error met while opening the database: a file that is
// not a database, or a damaged one, as a FileError; anything else as it is.
func openError(path string, err error) error {
	switch resultCode(err) {
	case sqlite3.SQLITE_NOTADB:
		return &FileError{File: path, Problem: problemNotSQLite, Err: err}
	case sqlite3.SQLITE_CORRUPT:
		return &FileError{File: path, Problem: problemDamaged, Err: err}
	case sqlite3.SQLITE_ERROR:
		// A damaged header (its format bytes) has no code of its own.
		if strings.Contains(err.Error(), "unsupported file format") {
			return &FileError{File: path, Problem: problemDamaged, Err: err}
		}
	}
	return err
}
