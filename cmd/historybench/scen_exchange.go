package main

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// exchangeConcurrency is how many owners send at once: half of the 100, so every direct message
// has a recipient that is not sending at that moment as often as one that is.
const exchangeConcurrency = 50

// benchExchange measures Exchange messages delivered per second by Send followed by Collect of the
// sender's outbox (issue 8), among cfg.Owners registered owners: direct (to another owner, in
// turn) and broadcast (a null recipient: every other owner gets it). A delivered message is one
// copy landing in one inbox, so a broadcast to 99 others counts 99. Each worker sends as an owner
// of its own.
func benchExchange(ctx context.Context, b *bench, h *historyd) ([]row, error) {
	owners := make([]string, b.cfg.Owners)
	for i := range owners {
		owners[i] = uuid.NewString()
		if _, err := h.Client.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: owners[i]}); err != nil {
			return nil, err
		}
	}
	content := `{"text": "hello", "n": 1}`
	// round sends req and collects the sender's outbox, which must deliver want copies (the message
	// sent, or also one that a concurrent collect of the same owner did not take): a round that
	// delivers nothing means the measurement is wrong, not slow.
	round := func(ctx context.Context, sender string, req *historyv1.SendRequest, want int) (int, error) {
		if _, err := h.Client.Exchange.Send(ctx, req); err != nil {
			return 0, err
		}
		resp, err := h.Client.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: sender})
		if err != nil {
			return 0, err
		}
		if resp.GetReportTruncated() {
			return 0, fmt.Errorf("collect report truncated: %d of %d messages reported", len(resp.GetDeliveries()), resp.GetCollectedCount())
		}
		n := 0
		for _, d := range resp.GetDeliveries() {
			n += int(d.GetReachedCount())
		}
		if n != want*int(resp.GetCollectedCount()) || resp.GetCollectedCount() < 1 {
			return 0, fmt.Errorf("collect of %d messages delivered %d copies, want %d each", resp.GetCollectedCount(), n, want)
		}
		return n, nil
	}
	conc := min(exchangeConcurrency, len(owners))
	direct := func(ctx context.Context, w, i int) (int, error) {
		to := owners[(w+1+i%(len(owners)-1))%len(owners)] // never the sender itself
		return round(ctx, owners[w], &historyv1.SendRequest{Sender: owners[w], Recipient: client.Participant(to), ContentJson: &content}, 1)
	}
	broadcast := func(ctx context.Context, w, _ int) (int, error) {
		return round(ctx, owners[w], &historyv1.SendRequest{Sender: owners[w], Recipient: client.Broadcast(), ContentJson: &content}, len(owners)-1)
	}
	kinds := []struct {
		name string
		fn   op
	}{{"direct", direct}, {fmt.Sprintf("broadcast to %d owners", len(owners)-1), broadcast}}
	var rows []row
	for _, k := range kinds {
		if _, err := closedLoop(ctx, conc, b.cfg.Duration/4, k.fn); err != nil { // warm-up
			return nil, err
		}
		var rates, sends []float64
		for run := range b.cfg.Runs {
			r, err := closedLoop(ctx, conc, b.cfg.Duration, k.fn)
			if err != nil {
				return nil, err
			}
			rates = append(rates, r.PerSecond())
			sends = append(sends, float64(r.Ops)/r.Elapsed.Seconds())
			b.progress("Exchange %s run %d: %.0f delivered/s, %.0f sends/s", k.name, run+1, r.PerSecond(), sends[len(sends)-1])
		}
		rows = append(rows, row{
			Name:   fmt.Sprintf("Exchange Send+Collect, %s (%d owners)", k.name, len(owners)),
			Unit:   "msg/s",
			Runs:   rates,
			Detail: fmt.Sprintf("%.0f Send+Collect rounds/s", summarize(sends).Median),
			Note:   fmt.Sprintf("messages delivered (one per inbox reached) per second; %d senders at once", conc),
		})
	}
	// The owners stay registered: Unregister would return each one's inboxes in one response, larger
	// than a gRPC message may be after the broadcast runs. This is the server's last scenario.
	return rows, nil
}
