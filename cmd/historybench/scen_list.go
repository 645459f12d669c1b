package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// listPage is the page size the issue measures.
const listPage = 100

// benchList measures the latency of ListMessages pages of 100 at random places of a branch of
// cfg.BigBranch messages over the same on a branch of cfg.SmallBranch (issue 8: target at most
// 1.5, i.e. a page costs O(page), not O(branch)). Requests go one at a time (no queueing in the
// figure); the page tokens are collected by walking each branch once, and each sample picks one
// at random. The two branches alternate which goes first, run after run.
func benchList(ctx context.Context, b *bench, h *historyd) ([]row, error) {
	return listRatio(ctx, b, h, "", b.cfg.ListSamples)
}

// listRatio is benchList on h with samples requests per branch and run; engine, when not empty,
// names h's engine in the row (issue 14 measures the same on the sqlite engine).
func listRatio(ctx context.Context, b *bench, h *historyd, engine string, samples int) ([]row, error) {
	big, err := populate(ctx, h, b.cfg.BigBranch)
	if err != nil {
		return nil, err
	}
	small, err := populate(ctx, h, b.cfg.SmallBranch)
	if err != nil {
		return nil, err
	}
	b.progress("ListMessages%s: branches of %d and %d messages written", engine, b.cfg.BigBranch, b.cfg.SmallBranch)
	bigTokens, err := pageTokens(ctx, h, big)
	if err != nil {
		return nil, err
	}
	smallTokens, err := pageTokens(ctx, h, small)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same pages in every run of the tool
	sample := func(branch string, tokens []string) (p50, p99 time.Duration, err error) {
		lat := make([]time.Duration, 0, samples)
		for range samples {
			req := &historyv1.ListMessagesRequest{BranchId: branch, PageSize: listPage, PageToken: tokens[rng.IntN(len(tokens))]}
			t0 := time.Now()
			resp, err := h.Client.History.ListMessages(ctx, req)
			lat = append(lat, time.Since(t0))
			if err != nil {
				return 0, 0, err
			}
			if len(resp.GetMessages()) != listPage {
				return 0, 0, fmt.Errorf("ListMessages: %d messages, want a page of %d", len(resp.GetMessages()), listPage)
			}
		}
		return percentile(lat, 50), percentile(lat, 99), nil
	}
	if _, _, err := sample(small, smallTokens); err != nil { // warm-up
		return nil, err
	}
	var ratios []float64
	var bigP50, smallP50, bigP99, smallP99 []float64
	for run := range b.cfg.Runs {
		var bp50, bp99, sp50, sp99 time.Duration
		if run%2 == 0 {
			if bp50, bp99, err = sample(big, bigTokens); err == nil {
				sp50, sp99, err = sample(small, smallTokens)
			}
		} else {
			if sp50, sp99, err = sample(small, smallTokens); err == nil {
				bp50, bp99, err = sample(big, bigTokens)
			}
		}
		if err != nil {
			return nil, err
		}
		ratios = append(ratios, float64(bp50)/float64(sp50))
		bigP50, smallP50 = append(bigP50, micros(bp50)), append(smallP50, micros(sp50))
		bigP99, smallP99 = append(bigP99, micros(bp99)), append(smallP99, micros(sp99))
		b.progress("ListMessages%s run %d: p50 %v on %d, %v on %d", engine, run+1, bp50, b.cfg.BigBranch, sp50, b.cfg.SmallBranch)
	}
	r := row{
		Name: fmt.Sprintf("ListMessages page of %d latency (p50), %s-message branch / %s-message branch%s",
			listPage, count(b.cfg.BigBranch), count(b.cfg.SmallBranch), engine),
		Unit: "ratio",
		Runs: ratios,
		Detail: fmt.Sprintf("p50 %.0f µs / %.0f µs, p99 %.0f µs / %.0f µs", summarize(bigP50).Median, summarize(smallP50).Median,
			summarize(bigP99).Median, summarize(smallP99).Median),
		Note: fmt.Sprintf("1 KB instructions, %d sequential requests at random pages per branch and run", samples),
	}
	r.Target, r.meets = atMost(1.5)
	if r.Met() == "NO" && b.cfg.Profile {
		r.Profile, err = b.cpuProfile(ctx, h, func(ctx context.Context) error {
			_, err := closedLoop(ctx, 1, b.profileDuration(), func(ctx context.Context, _, i int) (int, error) {
				_, err := h.Client.History.ListMessages(ctx, &historyv1.ListMessagesRequest{
					BranchId: big, PageSize: listPage, PageToken: bigTokens[i%len(bigTokens)]})
				return 1, err
			})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	deleteBranches(ctx, h, []string{big, small})
	return []row{r}, nil
}

// populate creates a branch with a system and n 1 KB instructions, written by 50 workers.
func populate(ctx context.Context, h *historyd, n int) (string, error) {
	resp, err := h.Client.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{
		System: &historyv1.SystemInput{SystemMessage: ptr("You are a benchmark.")},
	})
	if err != nil {
		return "", err
	}
	id := resp.GetBranch().GetId()
	return id, forEach(ctx, 50, n, func(ctx context.Context, i int) error {
		_, err := h.Client.History.AddMessage(ctx, addRequest(id, i))
		return err
	})
}

// pageTokens walks the branch in pages of listPage and returns the token of every full page (the
// first page's is "").
func pageTokens(ctx context.Context, h *historyd, branch string) ([]string, error) {
	tokens := []string{""}
	req := &historyv1.ListMessagesRequest{BranchId: branch, PageSize: listPage}
	for {
		resp, err := h.Client.History.ListMessages(ctx, req)
		if err != nil {
			return nil, err
		}
		next := resp.GetNextPageToken()
		if next == "" {
			break
		}
		tokens = append(tokens, next)
		req.PageToken = next
	}
	// The last token may start a short page: keep only tokens whose page is full.
	for len(tokens) > 1 {
		resp, err := h.Client.History.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: branch, PageSize: listPage, PageToken: tokens[len(tokens)-1]})
		if err != nil {
			return nil, err
		}
		if len(resp.GetMessages()) == listPage {
			break
		}
		tokens = tokens[:len(tokens)-1]
	}
	return tokens, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// count writes 1000000 as "1M", 100000 as "100k" and 1000 as "1k".
func count(n int) string {
	if n >= 1_000_000 && n%1_000_000 == 0 {
		return fmt.Sprintf("%dM", n/1_000_000)
	}
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func ptr[T any](v T) *T { return &v }
