package sqlite

import (
	"errors"
	"testing"
)

// Issue 15: damage found while the database is already unusable from an
// I/O error changes why it is unusable, and for good: the followers (the
// health service, its log) must be told, though usability does not change.
func TestDamageAfterIOErrorIsAnnounced(t *testing.T) {
	h := newHealth()
	ioErr, damage := errors.New("I/O error"), errors.New("damaged")
	h.set(ioErr)
	changed, err := h.get()
	if err != ioErr {
		t.Fatalf("unusable = %v, want the I/O error", err)
	}
	h.damage(damage)
	select {
	case <-changed:
	default:
		t.Fatal("damage after an I/O error did not close changed")
	}
	if _, err := h.get(); err != damage {
		t.Fatalf("unusable = %v, want the damage", err)
	}
	h.set(nil) // a commit or a probe: damage stays
	if _, err := h.get(); err != damage {
		t.Fatalf("after a clear, unusable = %v, want the damage still", err)
	}
}
