package storetest

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// ReadStopsAtTheCallersBudget is a database engine's check of ChatInput.Each
// and ExportInput.Each against the heap (review of the read paths, fault 1:
// ToChatMessages and ExportBranch read and decoded the whole branch whatever
// the response budget the server checks afterwards; a 1000x20 KB branch cost
// 60 MiB allocated to refuse a 4 MiB response). With Each the store hands the
// caller each message as it reads it and stops at the caller's error, so a
// refusal at a 1 MiB budget over a 20 MB branch may read 1 MiB of messages
// and allocate a few times that (a row, its decoded message, the driver's
// copies), never the branch. It is not a case of Run: it measures the
// process's allocations, so it must run alone, and memory's reads allocate
// nothing to measure.
func ReadStopsAtTheCallersBudget(t *testing.T, st store.Store) {
	id := newBranch(t, st)
	const size = 20000
	text := strings.Repeat("y", size)
	for range 1000 {
		addInstruction(t, st, id, text)
	}
	const budget = 1 << 20
	errOver := errors.New("over the caller's budget")
	for _, tc := range []struct {
		name string
		read func(each func(int, *envelope.Message) error) error
	}{
		{"ToChatMessages", func(each func(int, *envelope.Message) error) error {
			_, err := st.ToChatMessages(ctx(t), id, store.ChatInput{Unrendered: true, Each: each})
			return err
		}},
		{"ExportBranch", func(each func(int, *envelope.Message) error) error {
			_, err := st.ExportBranch(ctx(t), id, store.ExportInput{Mode: envelope.ModeJSON, Each: each})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counted, seen := 0, 0
			each := func(i int, m *envelope.Message) error {
				if i != seen {
					t.Errorf("message %d handed over as %d", seen, i)
				}
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
