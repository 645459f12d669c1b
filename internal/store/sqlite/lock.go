package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrLocked is a data directory another process holds.
var ErrLocked = errors.New("data directory is in use by another historyd")

// LockError names the directory another process holds.
type LockError struct{ Dir string }

func (e *LockError) Error() string {
	return fmt.Sprintf("data directory %s is in use by another historyd (its lock file %s is held)", e.Dir, filepath.Join(e.Dir, lockName))
}

func (e *LockError) Unwrap() error { return ErrLocked }

const lockName = "historyd.lock"

// DirError is a data directory that is missing and cannot be created
// (issue 15), such as one under a regular file.
type DirError struct {
	Dir string
	Err error
}

func (e *DirError) Error() string {
	return fmt.Sprintf("data directory %s does not exist and cannot be created: %v", e.Dir, e.Err)
}

func (e *DirError) Unwrap() error { return e.Err }

// dirLock is an exclusive advisory lock (flock) on a data directory, held
// as long as the file stays open; the kernel lets go of it when the
// process dies, kill -9 included, so a crash never leaves a stale lock.
type dirLock struct{ f *os.File }

// lockDir creates dir (0700) when missing and locks it, without waiting.
func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &DirError{Dir: dir, Err: err}
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockError{Dir: dir}
		}
		return nil, fmt.Errorf("data directory %s: lock: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock.
func (l *dirLock) unlock() error { return l.f.Close() }
