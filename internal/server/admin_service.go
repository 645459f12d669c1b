package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"io"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// Backuper is a store that writes a consistent copy of its data while it serves (issue 15): the
// sqlite engine's Backup. It returns the copy's size.
type Backuper interface {
	Backup(ctx context.Context, w io.Writer) (int64, error)
}

// AdminServer implements historyd.v1.AdminService (issue 15): operators' tasks on a running server.
type AdminServer struct {
	historyv1.UnsafeAdminServiceServer

	backup Backuper // nil: the store keeps nothing on disk (--store memory)
	chunk  int      // the most copy bytes in one BackupResponse
}

var _ historyv1.AdminServiceServer = (*AdminServer)(nil)

// NewAdminServer returns the AdminService over b (nil for a store with nothing to back up), sending
// the copy in chunks of at most maxResponse bytes of frame (the response budget).
func NewAdminServer(b Backuper, maxResponse int) *AdminServer {
	// The chunk size of ExportBranchStream, for the same reason: a frame fits any client's receive
	// limit down to 1 MiB, and a smaller response budget is kept.
	return &AdminServer{backup: b, chunk: min(exportChunkBytes, max(maxResponse-responseFixedBytes, 1))}
}

// RegisterAdmin registers the AdminService over b on s, behind s's interceptors (authentication
// included), and marks it SERVING in health (FollowStorage makes that follow the database Backup
// reads). b is nil when the store has nothing to back up.
func RegisterAdmin(s *Server, b Backuper) *AdminServer {
	as := NewAdminServer(b, s.limits.MaxResponseBytes)
	historyv1.RegisterAdminServiceServer(s.GRPCServer(), as)
	s.Health().SetServingStatus(historyv1.AdminService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return as
}

// Backup streams the store's copy in chunks, then a summary with its size and SHA-256
// (AdminService.Backup). The server holds at most two chunks of it in memory at once.
func (a *AdminServer) Backup(_ *historyv1.BackupRequest, stream historyv1.AdminService_BackupServer) error {
	if a.backup == nil {
		return store.ErrBackupUnsupported
	}
	ctx := stream.Context()
	sum := sha256.New()
	out := bufio.NewWriterSize(chunkSender{stream: stream, max: a.chunk}, a.chunk)
	n, err := a.backup.Backup(ctx, io.MultiWriter(sum, out))
	if err == nil {
		err = out.Flush()
	}
	if ctx.Err() != nil {
		return ctx.Err() // the client went away: CANCELED or DEADLINE_EXCEEDED, not a failure of ours
	}
	if err != nil {
		return err
	}
	return stream.Send(&historyv1.BackupResponse{Payload: &historyv1.BackupResponse_Summary{
		Summary: &historyv1.BackupSummary{SizeBytes: n, Sha256: sum.Sum(nil)},
	}})
}

// chunkSender sends what is written to it as BackupResponse chunks of at most max bytes.
type chunkSender struct {
	stream historyv1.AdminService_BackupServer
	max    int
}

func (c chunkSender) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += c.max {
		// A copy: the writer reuses p, and a message must not change after Send (stats handlers
		// may read it later).
		chunk := bytes.Clone(p[off:min(off+c.max, len(p))])
		if err := c.stream.Send(&historyv1.BackupResponse{Payload: &historyv1.BackupResponse_Chunk{Chunk: chunk}}); err != nil {
			return off, err
		}
	}
	return len(p), nil
}
