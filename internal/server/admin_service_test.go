package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// fakeBackuper writes data, or fails with err; with endless set it writes until the write fails or
// ctx ends, and reports on ended how Backup returned.
type fakeBackuper struct {
	data    []byte
	err     error
	endless bool
	ended   chan error
}

func (f *fakeBackuper) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if f.err != nil {
		return 0, f.err
	}
	if !f.endless {
		n, err := w.Write(f.data)
		return int64(n), err
	}
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			f.ended <- err
			return n, err
		}
		m, err := w.Write(f.data)
		n += int64(m)
		if err != nil {
			f.ended <- err
			return n, err
		}
	}
}

// adminClient serves an AdminService over b with a response budget of maxResponse bytes.
func adminClient(t *testing.T, b Backuper, maxResponse int, opts ...Option) historyv1.AdminServiceClient {
	t.Helper()
	ts := newTestServer(t, func(gs *grpc.Server) {
		historyv1.RegisterAdminServiceServer(gs, NewAdminServer(b, maxResponse))
	}, opts...)
	return historyv1.NewAdminServiceClient(ts.conn)
}

// receiveBackup reads a Backup stream to its end: the chunks' bytes, their sizes, the summary.
func receiveBackup(stream grpc.ServerStreamingClient[historyv1.BackupResponse]) ([]byte, []int, *historyv1.BackupSummary, error) {
	var got bytes.Buffer
	var sizes []int
	var summary *historyv1.BackupSummary
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got.Bytes(), sizes, summary, nil
		}
		if err != nil {
			return got.Bytes(), sizes, summary, err
		}
		if summary != nil {
			return nil, nil, nil, errors.New("a message after the summary")
		}
		switch p := resp.GetPayload().(type) {
		case *historyv1.BackupResponse_Chunk:
			got.Write(p.Chunk)
			sizes = append(sizes, len(p.Chunk))
		case *historyv1.BackupResponse_Summary:
			summary = p.Summary
		}
	}
}

// TestBackupStreamsChunksAndSummary: issue 15's brief, "streams it in chunks ... with the total size
// and a checksum": the chunks, each within the budget, add up to the copy, and the last message
// says its size and SHA-256.
func TestBackupStreamsChunksAndSummary(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 200) // 3,200 bytes
	const maxResponse = 1024 + responseFixedBytes         // chunks of 1 KiB
	c := adminClient(t, &fakeBackuper{data: data}, maxResponse)
	stream, err := c.Backup(testContext(t), &historyv1.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, sizes, summary, err := receiveBackup(stream)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("the chunks add up to %d bytes that differ from the %d of the copy", len(got), len(data))
	}
	if len(sizes) != 4 {
		t.Errorf("chunk sizes %v, want 4 chunks of at most 1024 bytes", sizes)
	}
	for _, n := range sizes {
		if n > 1024 || n == 0 {
			t.Errorf("chunk sizes %v, want each 1..1024 bytes", sizes)
		}
	}
	want := sha256.Sum256(data)
	if summary.GetSizeBytes() != int64(len(data)) || !bytes.Equal(summary.GetSha256(), want[:]) {
		t.Errorf("summary %v, want size %d and sha256 %x", summary, len(data), want)
	}
}

// TestBackupErrors: the memory engine has nothing to back up (FAILED_PRECONDITION), a second backup
// is ABORTED, and the summary is never sent after a failure.
func TestBackupErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      Backuper
		code   codes.Code
		reason historyv1.ErrorReason
	}{
		{"memory engine", nil, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_BACKUP_UNSUPPORTED},
		{"one at a time", &fakeBackuper{err: store.ErrBackupInProgress}, codes.Aborted, historyv1.ErrorReason_ERROR_REASON_BACKUP_IN_PROGRESS},
		{"store failure", &fakeBackuper{err: errors.New("disk on fire")}, codes.Internal, historyv1.ErrorReason_ERROR_REASON_INTERNAL},
		// Issue 15 review: a backup without room for its copy, or whose copy hit a full disk or an
		// I/O error, is the storage error a write meets, not a redacted INTERNAL.
		{"no room for the copy", &fakeBackuper{err: &sqlite.StorageError{File: "/data/historyd.db", Err: store.ErrStorageFull, Cause: errors.New("needs 80 bytes free in /data, 50 are free")}},
			codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_STORAGE_FULL},
		{"I/O error in the copy", &fakeBackuper{err: &sqlite.StorageError{File: "/data/historyd.db", Err: store.ErrStorageUnavailable, Cause: errors.New("disk I/O error")}},
			codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := adminClient(t, tc.b, DefaultMaxResponseBytes).Backup(testContext(t), &historyv1.BackupRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, _, summary, err := receiveBackup(stream)
			ei, _ := wantStatus(t, err, tc.code, tc.reason)
			var se *sqlite.StorageError
			if fb, ok := tc.b.(*fakeBackuper); ok && errors.As(fb.err, &se) &&
				(ei.GetMetadata()["file"] != se.File || !strings.Contains(status.Convert(err).Message(), se.Cause.Error())) {
				t.Errorf("status %v, ErrorInfo %v: want the message and metadata to name %s and the figures", err, ei, se.File)
			}
			if summary != nil {
				t.Errorf("a failed backup sent a summary: %v", summary)
			}
		})
	}
}

// TestBackupNeedsToken: issue 15, "asks the server over an admin RPC, behind auth": with tokens set,
// Backup without a valid token is UNAUTHENTICATED and with one it streams the copy.
func TestBackupNeedsToken(t *testing.T) {
	c := adminClient(t, &fakeBackuper{data: []byte("copy")}, DefaultMaxResponseBytes, WithAuthTokens(mustTokens(t, testToken)))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		code codes.Code
	}{
		{"no token", testContext(t), codes.Unauthenticated},
		{"wrong token", withToken(testContext(t), "wrong-token-0123456789abcdef"), codes.Unauthenticated},
		{"token", withToken(testContext(t), testToken), codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := c.Backup(tc.ctx, &historyv1.BackupRequest{})
			if err == nil {
				var got []byte
				got, _, _, err = receiveBackup(stream)
				if err == nil && string(got) != "copy" {
					t.Errorf("got %q, want the copy", got)
				}
			}
			if tc.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantStatus(t, err, tc.code, historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
		})
	}
}

// TestBackupClientCancels: a client that goes away ends the store's backup (which then removes its
// temporary copy: internal/store/sqlite's TestBackupCleansUp).
func TestBackupClientCancels(t *testing.T) {
	b := &fakeBackuper{data: bytes.Repeat([]byte{1}, 4096), endless: true, ended: make(chan error, 1)}
	c := adminClient(t, b, DefaultMaxResponseBytes)
	ctx, cancel := context.WithCancel(testContext(t))
	stream, err := c.Backup(ctx, &historyv1.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-b.ended:
		if err == nil {
			t.Error("the store's backup ended without an error")
		}
	case <-testContext(t).Done():
		t.Fatal("the store's backup went on after the client cancelled")
	}
}
