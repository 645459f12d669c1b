package postgres

import (
	"errors"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// TestUnstorableTextIsInvalidArgument pins the backstop of docs/decisions/0012 row 24: a client's
// text holding U+0000 that reaches a statement unchecked (here a request id given to the Go API,
// which internal/server refuses before the store sees it) is PostgreSQL's SQLSTATE 22021, answered
// as an input error wrapping envelope.ErrInvalid, not INTERNAL, and the store stays usable.
func TestUnstorableTextIsInvalidArgument(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	b := newBranch(t, s)
	for name, call := range map[string]func() error{
		"Recall": func() error {
			_, _, err := s.Recall(tctx(t), "", &b, store.OpAddMessage, "r\x00")
			return err
		},
		"AddMessage": func() error {
			_, err := s.AddMessage(tctx(t), b, store.AddInput{Factory: addFactory("x")}, store.WriteOptions{RequestID: "r\x00"})
			return err
		},
		"DeleteBranch": func() error {
			_, err := s.DeleteBranch(tctx(t), b, store.WriteOptions{RequestID: "d\x00"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			var se *StorageError
			if !errors.Is(err, envelope.ErrInvalid) || errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want envelope.ErrInvalid", err, err)
			}
			if ce, ok := err.(interface{ LogCause() error }); !ok || ce.LogCause() == nil {
				t.Errorf("err %T keeps no cause for the log", err)
			}
		})
	}
	if _, err := s.Health(); err != nil {
		t.Errorf("Health after the refusals: %v, want usable", err)
	}
	add(t, s, b, "after", store.WriteOptions{RequestID: "ok"})
}
