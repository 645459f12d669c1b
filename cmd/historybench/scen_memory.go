package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// memoryBranches spreads the stored messages over several branches, as a server holding many
// conversations does.
const memoryBranches = 10

// benchMemory measures resident memory per stored 1 KB message (issue 8; target at most 2.5 KB):
// for each run a fresh historyd, warmed up, its VmRSS read, cfg.MemMessages messages written over
// memoryBranches branches, its VmRSS read again; the growth divided by the messages. Go's heap
// figures (from the server's pprof endpoint) go into the detail, to tell live data from the
// collector's headroom.
func benchMemory(ctx context.Context, b *bench) ([]row, error) {
	var perMsg, heapPerMsg []float64
	var profile *profileTop
	for run := range b.cfg.Runs {
		h, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
		if err != nil {
			return nil, err
		}
		kb, heapKB, prof, err := memoryRun(ctx, b, h, run == b.cfg.Runs-1)
		if serr := h.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return nil, err
		}
		perMsg, heapPerMsg = append(perMsg, kb), append(heapPerMsg, heapKB)
		if prof != nil {
			profile = prof
		}
		b.progress("memory run %d: %.2f KB resident, %.2f KB heap in use per message", run+1, kb, heapKB)
	}
	r := row{
		Name:   "resident memory per stored 1 KB message",
		Unit:   "KB/msg",
		Runs:   perMsg,
		Detail: fmt.Sprintf("Go heap in use %.2f KB/msg", summarize(heapPerMsg).Median),
		Note:   fmt.Sprintf("VmRSS growth over %d messages on %d branches, fresh server per run (KB = 1024 bytes)", b.cfg.MemMessages, memoryBranches),
	}
	r.Target, r.meets = atMost(2.5)
	if r.Met() == "NO" {
		r.Profile = profile
	}
	return []row{r}, nil
}

// memoryRun is one run of benchMemory on h; with profile it also returns the top of a heap profile
// taken at the end (used when the target is missed).
func memoryRun(ctx context.Context, b *bench, h *historyd, profile bool) (rssKB, heapKB float64, prof *profileTop, err error) {
	warm, err := createBranches(ctx, h, 1) // warm-up: the code paths, the connection, the allocator
	if err != nil {
		return 0, 0, nil, err
	}
	if err := forEach(ctx, memoryBranches, 500, func(ctx context.Context, i int) error {
		_, err := h.Client.History.AddMessage(ctx, addRequest(warm[0], i))
		return err
	}); err != nil {
		return 0, 0, nil, err
	}
	deleteBranches(ctx, h, warm)
	rss0, err := h.RSS()
	if err != nil {
		return 0, 0, nil, err
	}
	heap0, err := heapInuse(ctx, h)
	if err != nil {
		return 0, 0, nil, err
	}
	branches, err := createBranches(ctx, h, memoryBranches)
	if err != nil {
		return 0, 0, nil, err
	}
	if err := forEach(ctx, memoryBranches, b.cfg.MemMessages, func(ctx context.Context, i int) error {
		_, err := h.Client.History.AddMessage(ctx, addRequest(branches[i%memoryBranches], i))
		return err
	}); err != nil {
		return 0, 0, nil, err
	}
	rss1, err := h.RSS()
	if err != nil {
		return 0, 0, nil, err
	}
	heap1, err := heapInuse(ctx, h)
	if err != nil {
		return 0, 0, nil, err
	}
	n := float64(b.cfg.MemMessages)
	if profile && b.cfg.Profile {
		if prof, err = b.heapProfile(ctx, h); err != nil {
			return 0, 0, nil, err
		}
	}
	return float64(rss1-rss0) / n / 1024, float64(heap1-heap0) / n / 1024, prof, nil
}

// heapInuse reads HeapInuse of the server's runtime.MemStats from its pprof endpoint
// (/debug/pprof/heap?debug=1 ends with them as "# HeapInuse = N" lines).
func heapInuse(ctx context.Context, h *historyd) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.PprofAddr+"/debug/pprof/heap?debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the server's heap figures: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			_, _ = io.Copy(io.Discard, resp.Body)
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no HeapInuse in the server's heap profile")
}
