package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// profileTopEntries and profileCumEntries are how many functions of a profile the results show,
// by own time and by cumulative time (whose first rows are the wrappers every call goes through).
const (
	profileTopEntries = 25
	profileCumEntries = 50
)

// profileDuration is how long the load runs while a CPU profile is taken: long enough for a few
// thousand samples at the profiler's 100 Hz on 2 cores.
func (b *bench) profileDuration() time.Duration { return max(b.cfg.Duration*2, time.Second) }

// cpuProfile takes a CPU profile of the server while load runs, saves it beside the results
// (bench/cpu-N.prof, ignored by git) and returns the top entries of `go tool pprof -top`.
func (b *bench) cpuProfile(ctx context.Context, h *historyd, load func(context.Context) error) (*profileTop, error) {
	d := b.profileDuration()
	seconds := max(int((d - d/4).Seconds()), 1) // inside the load, which starts first
	type fetched struct {
		data []byte
		err  error
	}
	got := make(chan fetched, 1)
	go func() {
		data, err := fetchProfile(ctx, h, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds))
		got <- fetched{data, err}
	}()
	loadErr := load(ctx)
	f := <-got
	if loadErr != nil {
		return nil, loadErr
	}
	if f.err != nil {
		return nil, f.err
	}
	return b.pprofTop(f.data, "cpu", nil)
}

// heapProfile takes a heap profile of the server and returns its top entries by in-use space.
func (b *bench) heapProfile(ctx context.Context, h *historyd) (*profileTop, error) {
	data, err := fetchProfile(ctx, h, "/debug/pprof/heap")
	if err != nil {
		return nil, err
	}
	return b.pprofTop(data, "heap", []string{"-sample_index=inuse_space"})
}

func fetchProfile(ctx context.Context, h *historyd, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.PprofAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("profiling the server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("profiling the server: %s: %s", resp.Status, data)
	}
	return data, nil
}

// pprofTop saves the profile next to the results and runs `go tool pprof -top` on it.
func (b *bench) pprofTop(data []byte, kind string, args []string) (*profileTop, error) {
	b.profiles++
	name := filepath.Join(filepath.Dir(b.cfg.Out), fmt.Sprintf("%s-%d.prof", kind, b.profiles))
	if err := os.WriteFile(name, data, 0o644); err != nil {
		return nil, err
	}
	top, err := b.pprof(name, profileTopEntries, append([]string{"-top"}, args...))
	if err != nil {
		return nil, err
	}
	// The same sorted by cumulative time, where the call paths (rendering, stack growth, logging)
	// show; the header lines are the same, so only the table is kept.
	cum, err := b.pprof(name, profileCumEntries, append([]string{"-top", "-cum"}, args...))
	if err != nil {
		return nil, err
	}
	if i := strings.Index(cum, "      flat"); i >= 0 {
		cum = cum[i:]
	}
	b.progress("%s profile saved to %s", kind, name)
	return &profileTop{Kind: kind, File: name, Top: top, Cum: cum}, nil
}

// pprof runs `go tool pprof` with args on the saved profile name, showing n functions, and returns
// its output.
func (b *bench) pprof(name string, n int, args []string) (string, error) {
	cmdArgs := append([]string{"tool", "pprof", fmt.Sprintf("-nodecount=%d", n)}, args...)
	out, err := exec.Command(b.cfg.Go, append(cmdArgs, b.bin, name)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w\n%s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
