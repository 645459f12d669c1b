package postgres

import (
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Review of the read paths, fault 1, on PostgreSQL: the read stops at the
// caller's budget (storetest.ReadStopsAtTheCallersBudget has the rule).
func TestReadStopsAtTheCallersBudget(t *testing.T) {
	storetest.ReadStopsAtTheCallersBudget(t, replicas(t, 1, nil)[0])
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
