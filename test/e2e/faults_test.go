//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	_ "modernc.org/sqlite" // to write another application's database

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 15: "Faults, each with a clear error that names the file and loses nothing acknowledged,
// tested with injected faults": a full disk (a size-limited tmpfs), --max-db-bytes, an I/O error
// on a write (the test hook), a data dir that cannot be created, and a file that is not
// historyd's database, each through the real binary.

// faultCtx is a context for one fault test's calls.
func faultCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	t.Cleanup(cancel)
	return ctx
}

// acked is what a test's writes were acknowledged with: the texts, in order, per branch.
type acked map[string][]string

// add writes text to branch; an acknowledged write is recorded.
func (a acked) add(ctx context.Context, c historyv1.HistoryServiceClient, branch, text string) error {
	if _, err := c.AddMessage(ctx, instruction(branch, text, "")); err != nil {
		return err
	}
	a[branch] = append(a[branch], text)
	return nil
}

// check reads every branch back and fails the test unless each holds exactly its acknowledged
// texts, in order.
func (a acked) check(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient) {
	t.Helper()
	for branch, want := range a {
		var got []string
		token := ""
		for {
			page, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: branch, PageSize: 100, PageToken: token, OmitRendered: true})
			if err != nil {
				t.Fatalf("ListMessages(%s): %v", branch, err)
			}
			for _, m := range page.GetMessages() {
				got = append(got, m.GetInstruction().GetInstruction())
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("branch %s holds %d messages, %d were acknowledged", branch, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("branch %s message %d differs from the acknowledged one", branch, i)
			}
		}
	}
}

// newBranch creates a branch.
func newBranch(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient) string {
	t.Helper()
	b, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	return b.GetBranch().GetId()
}

// wantFault checks err is code with reason, its message naming file, and returns its ErrorInfo
// metadata.
func wantFault(t *testing.T, err error, code codes.Code, reason historyv1.ErrorReason, file string) map[string]string {
	t.Helper()
	ei := errorInfoOf(err)
	if status.Code(err) != code || ei == nil || ei.GetReason() != reason.String() {
		t.Fatalf("error %v, want %v with reason %v", err, code, reason)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, file) {
		t.Fatalf("message %q does not name the database file %s", msg, file)
	}
	if ei.GetMetadata()["file"] != file {
		t.Fatalf("ErrorInfo metadata %v, want file %s", ei.GetMetadata(), file)
	}
	return ei.GetMetadata()
}

// fillUntilFull adds messages of size bytes to branch until a write fails, and returns that error;
// it fails the test if none does within max writes.
func fillUntilFull(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient, a acked, branch string, size, max int) error {
	t.Helper()
	for i := range max {
		if err := a.add(ctx, c, branch, fmt.Sprintf("%06d%s", i, strings.Repeat("f", size))); err != nil {
			t.Logf("full after %d writes of %d bytes: %v", i, size, err)
			return err
		}
	}
	t.Fatalf("%d writes of %d bytes and none failed", max, size)
	return nil
}

// health returns the overall grpc.health.v1 status of p.
func health(ctx context.Context, t *testing.T, c healthpb.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health/Check: %v", err)
	}
	return resp.GetStatus()
}

// TestFaultFullDisk: issue 15 "a full disk (RESOURCE_EXHAUSTED on writes, reads go on, writes
// resume once space is freed)", on a real full filesystem: historyd serves from a 4 MiB tmpfs that
// a filler file fills; writes fail with RESOURCE_EXHAUSTED (STORAGE_FULL) naming the file, reads
// answer, health stays SERVING (a full disk is not an unusable database); with the filler removed
// writes resume, and after a restart every acknowledged write is there.
func TestFaultFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "4m")
	dir := filepath.Join(mnt, "data")
	file := filepath.Join(dir, "historyd.db")
	p := startSQLite(t, dir)
	ctx := faultCtx(t)
	conn := dial(t, p)
	c, hc := historyv1.NewHistoryServiceClient(conn), healthpb.NewHealthClient(conn)
	a := acked{}
	branch := newBranch(ctx, t, c)
	for i := range 5 {
		if err := a.add(ctx, c, branch, fmt.Sprintf("before the disk filled %d", i)); err != nil {
			t.Fatal(err)
		}
	}

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	f.Close()

	err = fillUntilFull(ctx, t, c, a, branch, 32<<10, 200)
	wantFault(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_STORAGE_FULL, file)
	if _, err := c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: branch}); err != nil {
		t.Fatalf("reading on a full disk: %v", err)
	}
	a.check(ctx, t, c)
	if st := health(ctx, t, hc); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on a full disk: %v, want SERVING (reads go on)", st)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := a.add(ctx, c, branch, fmt.Sprintf("after the space was freed %d", i)); err != nil {
			t.Fatalf("write %d after freeing space: %v", i, err)
		}
	}
	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Fatalf("exit %d", code)
	}
	p = startSQLite(t, dir)
	a.check(ctx, t, historyv1.NewHistoryServiceClient(dial(t, p)))
	stop(t, p, syscall.SIGTERM, startTimeout)
}

// TestFaultMaxDBBytes: issue 15 "`--max-db-bytes` bounds the database's size with the same
// RESOURCE_EXHAUSTED": filled to 1 MiB, a write fails with STORAGE_FULL naming the file and the
// limit, reads and health go on, deleting the big branch makes room while full, writes resume,
// and after a restart every acknowledged write is there.
func TestFaultMaxDBBytes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "historyd.db")
	p := startSQLite(t, dir, "--max-db-bytes", "1MiB")
	ctx := faultCtx(t)
	conn := dial(t, p)
	c, hc := historyv1.NewHistoryServiceClient(conn), healthpb.NewHealthClient(conn)
	a := acked{}
	kept, big := newBranch(ctx, t, c), newBranch(ctx, t, c)
	if err := a.add(ctx, c, kept, "kept"); err != nil {
		t.Fatal(err)
	}
	err := fillUntilFull(ctx, t, c, a, big, 16<<10, 1000)
	md := wantFault(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_STORAGE_FULL, file)
	if md["maxDbBytes"] != "1048576" || md["flag"] != "--max-db-bytes" || !strings.Contains(status.Convert(err).Message(), "--max-db-bytes=1048576") {
		t.Fatalf("error %v, metadata %v: want the limit named", err, md)
	}
	a.check(ctx, t, c)
	if st := health(ctx, t, hc); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health at --max-db-bytes: %v, want SERVING", st)
	}
	if _, err := c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: big}); err != nil {
		t.Fatalf("DeleteBranch while full: %v", err)
	}
	delete(a, big)
	for i := range 10 {
		if err := a.add(ctx, c, kept, fmt.Sprintf("%d%s", i, strings.Repeat("k", 16<<10))); err != nil {
			t.Fatalf("write %d after deleting the big branch: %v", i, err)
		}
	}
	stop(t, p, syscall.SIGTERM, startTimeout)
	p = startSQLite(t, dir, "--max-db-bytes", "1MiB")
	a.check(ctx, t, historyv1.NewHistoryServiceClient(dial(t, p)))
	stop(t, p, syscall.SIGTERM, startTimeout)
}

// TestFaultIOErrorOnWrite: issue 15 "an I/O error on a write (UNAVAILABLE; the branch as it
// was)", with the test hook failing the next commit as SQLITE_IOERR_WRITE: the write is
// UNAVAILABLE (STORAGE_UNAVAILABLE) naming the file, the branch reads back exactly as before,
// health goes NOT_SERVING (the overall and HistoryService statuses) with a log line, the next write
// succeeds and health comes back to SERVING; nothing acknowledged is lost across a restart.
func TestFaultIOErrorOnWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "historyd.db")
	p := startServerBinary(t, testhookBin, "--store", "sqlite", "--data-dir", dir)
	ctx := faultCtx(t)
	conn := dial(t, p)
	c := historyv1.NewHistoryServiceClient(conn)
	a := acked{}
	branch := newBranch(ctx, t, c)
	for i := range 3 {
		if err := a.add(ctx, c, branch, fmt.Sprintf("before the fault %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := export(ctx, t, c, branch)
	var watches []healthpb.Health_WatchClient
	for _, service := range []string{"", historyv1.HistoryService_ServiceDesc.ServiceName} {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	expect := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for i, w := range watches {
			resp, err := w.Recv()
			if err != nil || resp.GetStatus() != want {
				t.Fatalf("health watch %d: %v, %v; want %v", i, resp.GetStatus(), err, want)
			}
		}
	}
	expect(healthpb.HealthCheckResponse_SERVING)

	if err := testHook(ctx, conn, "FailNextCommit"); err != nil {
		t.Fatalf("TestHook/FailNextCommit: %v", err)
	}
	_, err := c.AddMessage(ctx, instruction(branch, "not acknowledged", "retried"))
	wantFault(t, err, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE, file)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "I/O error") {
		t.Fatalf("message %q does not say what failed", msg)
	}
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	waitLog(t, p, 0, "the database is unusable", file)
	if after := export(ctx, t, c, branch); after.GetData() != before.GetData() {
		t.Fatalf("the failed write changed the branch:\nbefore %s\nafter  %s", before.GetData(), after.GetData())
	}
	if _, err := c.AddMessage(ctx, instruction(branch, "not acknowledged", "retried")); err != nil {
		t.Fatalf("the retry after the I/O error: %v", err)
	}
	a[branch] = append(a[branch], "not acknowledged") // the retry was
	expect(healthpb.HealthCheckResponse_SERVING)
	a.check(ctx, t, c)

	stop(t, p, syscall.SIGTERM, startTimeout)
	p = startSQLite(t, dir)
	a.check(ctx, t, historyv1.NewHistoryServiceClient(dial(t, p)))
	stop(t, p, syscall.SIGTERM, startTimeout)
}

// refused starts historyd on dir, which it must refuse: a non-zero exit and one log line that
// contains each of want.
func refused(t *testing.T, dir string, want ...string) {
	t.Helper()
	p := startProcess(t, "--listen", "127.0.0.1:0", "--log-format", "json", "--store", "sqlite", "--data-dir", dir)
	code, _ := wait(t, p, startTimeout)
	lines := p.stderr.Lines()
	if code == 0 || len(lines) != 1 {
		t.Fatalf("historyd on %s: exit %d, log %q; want a non-zero exit and one line", dir, code, lines)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("the log line %q does not say %q", lines[0], w)
		}
	}
}

// TestFaultDataDirCannotBeCreated: issue 15 "a missing data dir that cannot be created": under a
// regular file (even root cannot mkdir there), historyd exits non-zero with one line naming the
// directory and why.
func TestFaultDataDirCannotBeCreated(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(parent, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "data")
	refused(t, dir, dir, "cannot be created", "not a directory")
}

// TestFaultForeignOrCorruptFile: issue 15 "a corrupt or foreign file (refused at start: say what
// it is)": random bytes, another application's SQLite database and a truncated historyd database
// are each refused with one line naming the file and saying what it is, and left as they were.
func TestFaultForeignOrCorruptFile(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(t *testing.T, dir, file string)
		says  string
	}{
		{"random bytes", func(t *testing.T, _, file string) {
			b := make([]byte, 64<<10)
			for i := range b {
				b[i] = byte(i*31 + i/257)
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is not an SQLite database"},
		{"another application's database", func(t *testing.T, _, file string) {
			db, err := sql.Open("sqlite", "file:"+file)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO accounts VALUES (1, 'a')"); err != nil {
				t.Fatal(err)
			}
		}, "is an SQLite database but not historyd's"},
		{"truncated historyd database", func(t *testing.T, dir, file string) {
			p := startSQLite(t, dir)
			ctx := faultCtx(t)
			hc := historyv1.NewHistoryServiceClient(dial(t, p))
			branch := newBranch(ctx, t, hc)
			for i := range 100 {
				if _, err := hc.AddMessage(ctx, instruction(branch, fmt.Sprintf("%d%s", i, strings.Repeat("t", 4000)), "")); err != nil {
					t.Fatal(err)
				}
			}
			stop(t, p, syscall.SIGTERM, startTimeout)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(file, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, "is damaged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "historyd.db")
			c.write(t, dir, file)
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			refused(t, dir, file, c.says)
			if got, _ := os.ReadFile(file); string(got) != string(want) {
				t.Error("the refused file was changed")
			}
		})
	}
}

// mountTmpfs mounts a tmpfs of size (mount's -o size=, e.g. "4m") in a temporary directory and
// returns it; the test skips, saying why, where mounting is not permitted (it needs root with
// CAP_SYS_ADMIN; CI runs as root). Call it before starting a server on it: its cleanup, registered
// first, unmounts after the server's has stopped it.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("skipped: mounting a %s tmpfs needs root with CAP_SYS_ADMIN (CI runs as root): mount: %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}
