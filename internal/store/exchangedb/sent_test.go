package exchangedb_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// TestSentCacheCollectsAsTheDatabase: on SQLite a collect takes the messages it drains from the
// sent cache (sent.go) where it can. It must report what a collect reading them from their rows
// reports: the same messages (byte for byte), in outbox order, routed the same way, which needs
// the Send's `known` (a direct recipient registered at the Send that left since is "recipient
// left", one never registered is not). The outbox holds more messages than the cache, so the
// first collect takes the newest from the cache (among them the ones the routing turns on) and
// reads the oldest; the second runs on another Engine over the same database, whose cache is
// empty, so it reads every one.
func TestSentCacheCollectsAsTheDatabase(t *testing.T) {
	defer exchangedb.SetSentCacheSize(16)()
	s := openSQLite(t, t.TempDir())
	defer s.Close()
	opts := []exchange.Option{exchange.WithMaxOutbox(0), exchange.WithMaxInbox(0)}
	sender := exchangedb.New(s.ExchangeDriver(), opts)
	defer sender.Close()
	ctx := tctx(t)

	run := func(collector *exchangedb.Engine) []string {
		t.Helper()
		a, r, left, never := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		register(t, sender, a, r, left)
		sent := map[uuid.UUID]int{} // the Sends' order
		answers := map[uuid.UUID]string{}
		send := func(to envelope.Participant, text string) {
			t.Helper()
			m, err := sender.Send(ctx, exchange.SendRequest{Sender: a, Recipient: to, Content: jsonv.StringValue(text)})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			sent[m.ID], answers[m.ID] = len(sent), string(b)
		}
		// The oldest are evicted from the cache of 16 and read from their rows; the last ones,
		// which the routing turns on, come from the cache in the first run.
		for i := range 20 {
			send(envelope.IDParticipant(r), fmt.Sprint("direct ", i))
		}
		send(envelope.IDParticipant(left), "to the one who leaves")
		send(envelope.IDParticipant(never), "to one never registered")
		send(envelope.None(), "to all")
		if _, _, err := sender.UnregisterIf(ctx, left, nil); err != nil {
			t.Fatal(err)
		}
		rep, err := collector.Collect(ctx, a, exchange.ReportOptions{OwnerIDs: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range rep.Deliveries {
			body, err := d.Message.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != answers[d.Message.ID] {
				t.Fatalf("collected %s, sent %s", body, answers[d.Message.ID])
			}
			line := fmt.Sprintf("send %d reached %d", sent[d.Message.ID], d.ReachedCount)
			for _, dr := range d.Dropped {
				line += fmt.Sprintf(" dropped %v", dr.Reason)
			}
			got = append(got, line)
		}
		got = append(got, fmt.Sprintf("delivered %d drops %d", rep.Delivered, rep.Drops))
		if _, _, err := sender.UnregisterIf(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sender.UnregisterIf(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cached := run(sender)
	other := exchangedb.New(s.ExchangeDriver(), opts)
	defer other.Close()
	read := run(other)
	if len(cached) != 24 {
		t.Fatalf("%d deliveries and a total, want 23 and a total", len(cached))
	}
	if !slices.Equal(cached, read) {
		for i := range min(len(cached), len(read)) {
			if cached[i] != read[i] {
				t.Fatalf("delivery %d: from the cache %q, from the rows %q", i, cached[i], read[i])
			}
		}
		t.Fatalf("from the cache %d lines, from the rows %d", len(cached), len(read))
	}
	// The two drops differ only by the Send's known: "recipient left" and not registered.
	left, never := cached[20], cached[21]
	if !strings.Contains(left, " dropped ") || !strings.Contains(never, " dropped ") ||
		left[strings.Index(left, " dropped "):] == never[strings.Index(never, " dropped "):] {
		t.Errorf("the drops of a recipient that left and of one never registered: %q, %q", left, never)
	}
	t.Logf("the routed ones: %q", cached[20:23])
}
