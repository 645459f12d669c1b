package rowjson

import (
	"encoding/json"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// marshalled is how EncodeResult wrote a write result before it wrote it directly: json.Marshal of
// its resultJSON.
func marshalled(t *testing.T, r store.WriteResult) string {
	t.Helper()
	j := resultJSON{Index: r.Index, Head: r.Head}
	var err error
	if j.Message, err = encodeStored(r.Message); err == nil && r.Updated != nil {
		j.Updated, err = encodeStored(*r.Updated)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func message(t *testing.T, text string) *envelope.Message {
	t.Helper()
	c, err := store.CreateMessage(&store.Factory{Instruction: jsonv.StringValue(text)})
	if err != nil {
		t.Fatal(err)
	}
	return c.Message
}

// A write result written directly is the text json.Marshal wrote (what servers of either version
// read back), field for field; a message's text given by known is used as it is; and what it
// decodes to is the result.
func TestEncodeWriteResult(t *testing.T) {
	m, u := message(t, "hello"), message(t, "the updated one")
	cases := map[string]store.WriteResult{
		"empty":         {},
		"head only":     {Head: 7},
		"message":       {Message: store.StoredMessage{Message: m, Sequence: 3}, Index: 2, Head: 3},
		"index 0":       {Message: store.StoredMessage{Message: m, Sequence: 1}, Head: 1},
		"negative":      {Message: store.StoredMessage{Message: m, Sequence: 1}, Index: -1, Head: 1},
		"updated":       {Message: store.StoredMessage{Message: m, Sequence: 5}, Index: 4, Updated: &store.StoredMessage{Message: u, Sequence: 5}, Head: 5},
		"updated alone": {Updated: &store.StoredMessage{Message: u, Sequence: 9}, Head: 9},
		"no message":    {Updated: &store.StoredMessage{}, Head: 2},
	}
	codec := Codec{Name: "test", DecodeMessage: func(body string) (*envelope.Message, error) {
		return envelope.DecodeJSON([]byte(body))
	}}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			want := marshalled(t, r)
			got, err := EncodeResult(r)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("EncodeResult\n got %s\nwant %s", got, want)
			}
			calls := 0
			known := func(msg *envelope.Message) (string, bool) {
				calls++
				b, err := msg.MarshalJSON()
				return string(b), err == nil
			}
			if got, err = EncodeResultKnown(r, known); err != nil || got != want {
				t.Fatalf("EncodeResultKnown\n got %s (%v)\nwant %s", got, err, want)
			}
			if n := countMessages(r); calls != n {
				t.Fatalf("known was asked %d times for %d messages", calls, n)
			}
			back, err := codec.DecodeResult(store.OpAddMessage, got)
			if err != nil {
				t.Fatal(err)
			}
			if again := encodedAgain(t, back.(store.WriteResult)); again != want {
				t.Fatalf("decoded and encoded again, the result changed")
			}
		})
	}
	// json.Marshal escaped <, > and & in a message's text (as \u003c...); the text written directly
	// keeps them as the message's encoding has them. Both read back as the same result.
	h := store.WriteResult{Message: store.StoredMessage{Message: message(t, "a <b> & c"), Sequence: 2}, Index: 1, Head: 2}
	direct, err := EncodeResult(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{direct, marshalled(t, h)} {
		back, err := codec.DecodeResult(store.OpAddMessage, text)
		if err != nil {
			t.Fatal(err)
		}
		if again := encodedAgain(t, back.(store.WriteResult)); again != direct {
			t.Fatalf("%s read back as %s, want %s", text, again, direct)
		}
	}
	// The known text is what is stored, as it is: the caller vouches that it is the message's.
	r := store.WriteResult{Message: store.StoredMessage{Message: m, Sequence: 1}, Head: 1}
	got, err := EncodeResultKnown(r, func(*envelope.Message) (string, bool) { return `{"k":1}`, true })
	if err != nil || got != `{"m":{"m":{"k":1},"s":1},"h":1}` {
		t.Fatalf("EncodeResultKnown with a known text: %s (%v)", got, err)
	}
}

func countMessages(r store.WriteResult) int {
	n := 0
	if r.Message.Message != nil {
		n++
	}
	if r.Updated != nil && r.Updated.Message != nil {
		n++
	}
	return n
}

func encodedAgain(t *testing.T, r store.WriteResult) string {
	t.Helper()
	out, err := EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
