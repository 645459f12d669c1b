//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

const (
	ownerA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	ownerB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	ownerC = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"
)

// exampleMessage is the part of a wire Message the example's checks read.
type exampleMessage struct {
	ID        string
	Sender    string
	Recipient *string
	Generic   struct{ ContentJSON string }
}

// exampleResponse holds whichever fields an ExchangeService response of the example has.
type exampleResponse struct {
	Flow           struct{ OwnerID string }
	Message        exampleMessage
	Messages       []exampleMessage
	DeliveredCount int
	Deliveries     []struct {
		MessageID       string
		ReachedOwnerIDs []string
		Drops           []struct {
			Recipient any
			Reason    string
		}
	}
	Collects []struct {
		OwnerID         string
		ReachedOwnerIDs []string
	}
	DeadLetters []struct {
		Reason  string
		Message exampleMessage
	}
	Owners []struct{ OwnerID string }
	// Lease's answer and Receive's marks (issue 18).
	Leased []struct {
		Message exampleMessage
		Receipt string
		Attempt int
	}
	Leases map[string]struct {
		Attempts int
		Leased   bool
	}
}

// TestExchangeExample runs docs/examples/exchange.sh (grpcurl only) against the real binary and
// checks what each step printed (issue 6 acceptance; ADR-0006 D5).
func TestExchangeExample(t *testing.T) {
	checkExchangeExample(t, runExchangeExample(t, startServer(t)))
}

// runExchangeExample runs docs/examples/exchange.sh against p and returns its steps' responses.
func runExchangeExample(t *testing.T, p *proc) map[string]exampleResponse {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "docs", "examples", "exchange.sh"))
	cmd.Env = append(os.Environ(), "HISTORYD_ADDR="+p.addr, "GRPCURL="+grpcurlBin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("exchange.sh against %s: %v\nstdout:\n%s\nstderr:\n%s", p.addr, err, stdout.String(), stderr.String())
	}
	return parseSteps(t, stdout.String())
}

// checkExchangeExample checks what each step of exchange.sh printed.
func checkExchangeExample(t *testing.T, steps map[string]exampleResponse) {
	t.Helper()
	// Each register step answers with the flow of the owner it registered (issue 13 item 14: the
	// check was `!strings.HasPrefix(label, "register ") || got == ""`, whose first half is always
	// false).
	for label, want := range map[string]string{"register A": ownerA, "register B": ownerB, "register C": ownerC} {
		if got := steps[label].Flow.OwnerID; got != want {
			t.Errorf("%s: flow of %q, want %q", label, got, want)
		}
	}
	direct, unset, all := steps["A to B"].Message, steps["A to nobody"].Message, steps["C to all"].Message
	if direct.Recipient == nil || *direct.Recipient != ownerB || all.Recipient != nil || unset.Recipient == nil || *unset.Recipient != "unset" {
		t.Errorf("sent recipients: direct %v, broadcast %v, none %v", direct.Recipient, all.Recipient, unset.Recipient)
	}
	collect := steps["collect A"]
	if collect.DeliveredCount != 1 || len(collect.Deliveries) != 2 ||
		!slices.Equal(collect.Deliveries[0].ReachedOwnerIDs, []string{ownerB}) ||
		len(collect.Deliveries[1].Drops) != 1 || collect.Deliveries[1].Drops[0].Reason != "DEAD_LETTER_REASON_UNSET_RECIPIENT" {
		t.Errorf("collect A = %+v, want the direct message delivered and the unset one dropped", collect)
	}
	if ca := steps["collect all"]; ca.DeliveredCount != 1 || len(ca.Collects) != 1 || ca.Collects[0].OwnerID != ownerC {
		t.Errorf("collect all = %+v, want C's broadcast", ca)
	}
	if got := ids(steps["receive B"].Messages); !slices.Equal(got, []string{direct.ID, all.ID}) {
		t.Errorf("receive B = %v, want [direct broadcast] = %v", got, []string{direct.ID, all.ID})
	}
	if got := steps["pop B from A"].Message; got.ID != direct.ID || got.Generic.ContentJSON != `{"text":"hello B"}` {
		t.Errorf("pop = %+v, want the direct message", got)
	}
	if got := ids(steps["receive B again"].Messages); !slices.Equal(got, []string{all.ID}) {
		t.Errorf("receive B again = %v, want the broadcast only", got)
	}
	if dl := steps["dead letters of A"].DeadLetters; len(dl) != 1 || dl[0].Message.ID != unset.ID {
		t.Errorf("dead letters = %+v", dl)
	}
	var owners []string
	for _, o := range steps["owners"].Owners {
		owners = append(owners, o.OwnerID)
	}
	if !slices.Equal(owners, []string{ownerA, ownerB, ownerC}) {
		t.Errorf("owners = %v", owners)
	}
	// Issue 18: "docs/examples/exchange.sh shows Lease and Ack". B leases A's second message; Receive
	// shows it marked as leased, PopMessage passes it by, and the Ack removes it.
	again := steps["A to B again"].Message
	if c := steps["collect A again"]; c.DeliveredCount != 1 {
		t.Errorf("collect A again = %+v, want the second direct message delivered", c)
	}
	if l := steps["lease B from A"].Leased; len(l) != 1 || l[0].Message.ID != again.ID || l[0].Attempt != 1 || l[0].Receipt == "" {
		t.Errorf("lease B from A = %+v, want %s on attempt 1 with a receipt", l, again.ID)
	}
	leasedStep := steps["receive B leased"]
	// A's inbox at B was made first (the popped message), so it comes first.
	if got := ids(leasedStep.Messages); !slices.Equal(got, []string{again.ID, all.ID}) {
		t.Errorf("receive B leased = %v, want [leased, broadcast] = %v", got, []string{again.ID, all.ID})
	}
	if l, ok := leasedStep.Leases[again.ID]; !ok || !l.Leased || l.Attempts != 1 || len(leasedStep.Leases) != 1 {
		t.Errorf("receive B leased: leases %+v, want %s alone, leased, attempt 1", leasedStep.Leases, again.ID)
	}
	if got := steps["pop B from A leased"].Message; got.ID != "" {
		t.Errorf("pop B from A leased = %+v, want nothing: PopMessage never takes a leased message", got)
	}
	if got := ids(steps["receive B acked"].Messages); !slices.Equal(got, []string{all.ID}) {
		t.Errorf("receive B acked = %v, want the broadcast only: the Ack removed the leased message", got)
	}
}

// parseSteps splits the example's output at its "### <label>: ..." lines and decodes each
// response. protojson writes lowerCamel names; encoding/json matches them case-insensitively.
func parseSteps(t *testing.T, out string) map[string]exampleResponse {
	t.Helper()
	steps := map[string]exampleResponse{}
	var label string
	var body strings.Builder
	flush := func() {
		if label == "" {
			return
		}
		var r exampleResponse
		if err := json.Unmarshal([]byte(body.String()), &r); err != nil {
			t.Fatalf("step %q printed %q: %v", label, body.String(), err)
		}
		steps[label] = r
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "### "); ok {
			flush()
			label, _, _ = strings.Cut(rest, ":")
			body.Reset()
			continue
		}
		body.WriteString(line + "\n")
	}
	flush()
	if len(steps) != 20 {
		t.Fatalf("%d steps in the output, want 20:\n%s", len(steps), out)
	}
	return steps
}

func ids(msgs []exampleMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

// TestExchangeStreamAndLimits drives the real process with a Go client: the outbox limit set by
// HISTORYD_EXCHANGE_MAX_OUTBOX answers RESOURCE_EXHAUSTED, a SubscribeInbox stream receives a
// broadcast live, and SIGTERM ends the open stream with UNAVAILABLE while the process exits 0 well
// within its grace period (issue 6: limits as flags with env; shutdown ends streams cleanly).
func TestExchangeStreamAndLimits(t *testing.T) {
	t.Setenv("HISTORYD_EXCHANGE_MAX_OUTBOX", "1")
	const grace = 20 * time.Second
	p := startServer(t, "--grace-period", grace.String())
	client := historyv1.NewExchangeServiceClient(dial(t, p))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, o := range []string{ownerA, ownerB} {
		if _, err := client.Register(ctx, &historyv1.RegisterRequest{OwnerId: o}); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := client.SubscribeInbox(ctx, &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := stream.Recv(); err != nil || first.GetHeartbeat() == nil {
		t.Fatalf("first frame %v, %v; want a heartbeat", first, err)
	}
	sent, err := client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: structpb.NewNullValue(), ContentJson: proto.String(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: structpb.NewNullValue()})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second Send with a max outbox of 1 = %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := client.Collect(ctx, &historyv1.CollectRequest{OwnerId: ownerA}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if m := f.GetMessage(); m != nil {
			if m.GetId() != sent.GetMessage().GetId() {
				t.Errorf("streamed %s, want %s", m.GetId(), sent.GetMessage().GetId())
			}
			break
		}
	}

	code, elapsed := stop(t, p, syscall.SIGTERM, grace)
	if code != 0 || elapsed >= grace {
		t.Errorf("exit %d after %v, want 0 well within %v: the open stream must not hold shutdown", code, elapsed, grace)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("stream ended with %v, want UNAVAILABLE", err)
			}
			break
		}
	}
}
