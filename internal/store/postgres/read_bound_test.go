package postgres

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// Review of the read paths, fault 1, on PostgreSQL (the sqlite package's
// TestReadStopsAtTheCallersBudget): ToChatMessages and ExportBranch read the
// whole branch before the server could refuse a response past its budget.
// With Each the rows are decoded one at a time and the read stops at the
// caller's error, so a refusal at a 1 MiB budget over a 20 MB branch
// allocates a few times the budget, not the branch.
func TestReadStopsAtTheCallersBudget(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	id := newBranch(t, s)
	const size = 20000
	text := strings.Repeat("y", size)
	for range 1000 {
		add(t, s, id, text, store.WriteOptions{})
	}
	const budget = 1 << 20
	errOver := errors.New("over the caller's budget")
	for _, tc := range []struct {
		name string
		read func(each func(int, *envelope.Message) error) error
	}{
		{"ToChatMessages", func(each func(int, *envelope.Message) error) error {
			_, err := s.ToChatMessages(tctx(t), id, store.ChatInput{Unrendered: true, Each: each})
			return err
		}},
		{"ExportBranch", func(each func(int, *envelope.Message) error) error {
			_, err := s.ExportBranch(tctx(t), id, store.ExportInput{Mode: envelope.ModeJSON, Each: each})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counted, seen := 0, 0
			each := func(i int, m *envelope.Message) error {
				seen++
				if counted += size; counted > budget {
					return errOver
				}
				return nil
			}
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			err := tc.read(each)
			runtime.ReadMemStats(&m1)
			if err != errOver { //nolint:errorlint // the caller's error comes back as it is
				t.Fatalf("error %v (%T), want the caller's own", err, err)
			}
			if want := budget/size + 1; seen != want {
				t.Errorf("the store handed over %d messages after the one refused was message %d", seen, want)
			}
			alloc := m1.TotalAlloc - m0.TotalAlloc
			t.Logf("refused after %d of 1000 messages, allocating %d KiB", seen, alloc>>10)
			if alloc > 8*budget {
				t.Errorf("refusing at a %d KiB budget allocated %d KiB: the read did not stop at the budget", budget>>10, alloc>>10)
			}
		})
	}
}

// A caller that takes every message reads them in pages (eachInOrder): the
// pages meet without a gap or a repeat, in the full order.
func TestEachReadsEveryPage(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	id := newBranch(t, s)
	if _, err := s.SetSystem(tctx(t), id, envelope.NewSystem("S"), store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 3*eachFirstPage + 3 // past the first two pages (64, then 128)
	for i := range n {
		add(t, s, id, msgText(i), store.WriteOptions{})
	}
	want, err := s.ToChatMessages(tctx(t), id, store.ChatInput{Unrendered: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []*envelope.Message
	if _, err := s.ToChatMessages(tctx(t), id, store.ChatInput{Each: func(i int, m *envelope.Message) error {
		got = append(got, m)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Entries) || len(got) != n+1 {
		t.Fatalf("handed %d messages, want %d", len(got), len(want.Entries))
	}
	for i, e := range want.Entries {
		if got[i].ID != e.MessageID {
			t.Fatalf("message %d is %s, want %s", i, got[i].ID, e.MessageID)
		}
	}
}
