package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// startDiskPerMessage is the disk a generated message needs, with room to spare (about 2.9 KB
// measured, row, indexes and event); the bench scales the database down to fit the free space.
const startDiskPerMessage = 4 << 10

// benchStart measures the time from starting historyd to Health/Check answering SERVING on a
// sqlite database of cfg.StartMessages messages over the same on an empty database (issue 14:
// reported; expected independent of size, since a start reads no message row). The database is
// generated once (dbgen.go); each run starts and stops a server on each database, alternating
// which goes first. The time runs from exec to the first SERVING answer, the process's own start
// (the runtime, flag parsing, opening and migrating the database, the listener) included; the
// database files are in the OS's page cache from the warm-up start, as they are for a restart.
func benchStart(ctx context.Context, b *bench) ([]row, error) {
	root, err := os.MkdirTemp("", "historybench-start-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	want, note := b.cfg.StartMessages, ""
	if free, err := freeBytes(root); err == nil && int64(want)*startDiskPerMessage > free/2 {
		want = int(free / 2 / startDiskPerMessage)
		note = fmt.Sprintf("; scaled down from %s to fit half of the %s free", count(b.cfg.StartMessages), mib(free))
		b.progress("start: only %s free: a database of %d messages instead of %d", mib(free), want, b.cfg.StartMessages)
	}
	bigDir, emptyDir := root+"/big", root+"/empty"
	t0 := time.Now()
	n, probe, err := generateDatabase(ctx, bigDir, want)
	if err != nil {
		return nil, err
	}
	gen := time.Since(t0)
	size, err := dirBytes(bigDir)
	if err != nil {
		return nil, err
	}
	b.progress("start: database of %d messages (%s) generated in %v", n, mib(size), gen.Round(time.Second))

	startOn := func(dir string, check func(*historyd) error) func() (measured, error) {
		return func() (measured, error) {
			t0 := time.Now()
			h, err := startHistoryd(ctx, b.bin, b.sqliteFlags(dir, "normal")...)
			if err != nil {
				return measured{}, err
			}
			took := time.Since(t0)
			if check != nil {
				err = check(h)
			}
			if serr := h.stop(); err == nil {
				err = serr
			}
			return measured{PerSecond: took.Seconds() * 1000}, err // milliseconds, in the rate's place
		}
	}
	// The warm-up starts check the generated database: a copied branch reads back a full page,
	// and the empty database (made by this first start) holds no branch.
	checkBig := func(h *historyd) error {
		resp, err := h.Client.History.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: probe, PageSize: listPage})
		if err != nil {
			return fmt.Errorf("reading a generated branch: %w", err)
		}
		if len(resp.GetMessages()) < min(listPage, n/genSeedBranches) {
			return fmt.Errorf("a generated branch reads back %d messages", len(resp.GetMessages()))
		}
		return nil
	}
	checkEmpty := func(h *historyd) error {
		resp, err := h.Client.History.ListBranches(ctx, &historyv1.ListBranchesRequest{})
		if err != nil || len(resp.GetBranches()) != 0 {
			return fmt.Errorf("the empty database: %d branches (%v)", len(resp.GetBranches()), err)
		}
		return nil
	}
	if _, err := startOn(bigDir, checkBig)(); err != nil {
		return nil, err
	}
	if _, err := startOn(emptyDir, checkEmpty)(); err != nil {
		return nil, err
	}
	bigs, empties, err := alternate(b, fmt.Sprintf("start to SERVING, ms on %s over ms on empty,", count(n)), startOn(bigDir, nil), startOn(emptyDir, nil))
	if err != nil {
		return nil, err
	}
	rs, bigMS, emptyMS, _, _ := ratios(bigs, empties)
	return []row{{
		Name:   fmt.Sprintf("sqlite start to SERVING, %s-message database / empty database", count(n)),
		Unit:   "ratio",
		Runs:   rs,
		Detail: fmt.Sprintf("%.0f ms / %.0f ms; database %s, generated in %v", bigMS, emptyMS, mib(size), gen.Round(time.Second)),
		Note: fmt.Sprintf("exec to the first Health/Check SERVING, then a graceful stop; %d 1 KB messages: %d seed branches written through the engine's Store API, copied with INSERT ... SELECT under new ids%s",
			n, genSeedBranches, note),
	}}, nil
}

// freeBytes is the space available to this user on dir's file system.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
