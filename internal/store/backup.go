package store

import "errors"

// The errors of a backup (issue 15). They are the engine-neutral answers
// of a store that copies its data while it serves (internal/store/sqlite's
// Backup), so that internal/server maps them once whatever the engine.
var (
	// ErrBackupInProgress: another backup of the store is running
	// (ABORTED): one runs at a time, because each writes a temporary copy
	// of the database beside it.
	ErrBackupInProgress = errors.New("another backup is running; retry once it ends")

	// ErrBackupUnsupported: the store keeps nothing on disk to copy
	// (FAILED_PRECONDITION): the memory engine.
	ErrBackupUnsupported = errors.New("this store keeps its data in memory only, so there is nothing to back up; run historyd with --store sqlite")
)

// BackupUnsupportedError is ErrBackupUnsupported for a store whose data
// is backed up some other way (PostgreSQL's: with the database's own
// tools); Why says how, for the client.
type BackupUnsupportedError struct{ Why string }

func (e *BackupUnsupportedError) Error() string { return e.Why }

// Unwrap makes errors.Is(err, ErrBackupUnsupported) hold.
func (e *BackupUnsupportedError) Unwrap() error { return ErrBackupUnsupported }
