package exchange

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// testTimeout bounds every wait in these tests, so that a bug fails a test instead of hanging it.
const testTimeout = 10 * time.Second

// Owners used throughout the tests, spelled like the vectors' fixed UUIDs.
var (
	ownerA = uuid.MustParse("aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa")
	ownerB = uuid.MustParse("bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb")
	ownerC = uuid.MustParse("cccccccc-cccc-4ccc-8ccc-cccccccccccc")
	ownerD = uuid.MustParse("dddddddd-dddd-4ddd-8ddd-dddddddddddd")
)

// newRegistered returns an Exchange with the given owners registered, closed at the end of the test.
func newRegistered(t testing.TB, owners []uuid.UUID, opts ...Option) *Exchange {
	t.Helper()
	x := New(opts...)
	t.Cleanup(x.Close)
	for _, o := range owners {
		if _, err := x.Register(o); err != nil {
			t.Fatalf("Register(%s): %v", o, err)
		}
	}
	return x
}

// to is a direct recipient.
func to(id uuid.UUID) envelope.Participant { return envelope.IDParticipant(id) }

// text is JSON string content.
func text(s string) jsonv.Value { return jsonv.StringValue(s) }

// mustSend sends and fails the test on error.
func mustSend(t testing.TB, x *Exchange, from uuid.UUID, rcpt envelope.Participant, content string) *envelope.Message {
	t.Helper()
	m, err := x.Send(SendRequest{Sender: from, Recipient: rcpt, Content: text(content)})
	if err != nil {
		t.Fatalf("Send(%s -> %s, %q): %v", from, rcpt, content, err)
	}
	return m
}

// mustCollect collects and fails the test on error.
func mustCollect(t testing.TB, x *Exchange, owner uuid.UUID) *Report {
	t.Helper()
	rep, err := x.Collect(owner)
	if err != nil {
		t.Fatalf("Collect(%s): %v", owner, err)
	}
	return rep
}

// contents returns the string contents of msgs.
func contents(msgs []*envelope.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i], _ = m.Content.Dict().Str()
	}
	return out
}
