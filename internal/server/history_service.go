package server

import (
	"context"
	"errors"
	"fmt"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// HistoryServer serves historyd.v1.HistoryService over a store.Store (ADR-0006 D3, D4). The
// handlers are thin: validate and convert the request, call the store, convert the result; the
// status interceptor maps domain errors (errors.go). A repeated request_id is answered from the
// store's record before the request is validated (docs/design.md#branches: the repeat check comes
// before any other check).
type HistoryServer struct {
	historyv1.UnsafeHistoryServiceServer

	store   store.Store
	logger  *zap.Logger
	streams streamConfig // WatchBranch's heartbeat and send timeout
	now     func() time.Time

	stopping chan struct{} // closed by EndStreams
	stopOnce sync.Once

	frames       [2]frameCache // WatchBranch frames shared by a commit's watchers: [0] unrendered, [1] rendered
	encodeFrames bool          // set by RegisterHistory: the Server's codec sends pre-encoded frames
	maxFrame     int           // the largest WatchBranch frame sent: the response budget; tests lower it

	// The byte bounds of issue 11 (history_budget.go), from the Server's Limits: the response
	// budget of unary responses, the render cap of one message, the ImportBranchStream limit.
	maxResponse, maxRendered, maxImport int
	// maxAppendWindow caps an AppendMessages stream's window (Limits.MaxAppendWindow).
	maxAppendWindow int

	// streamEnded, when set, is called with the error each WatchBranch handler returns; tests use
	// it to know that a stream has ended on the server side.
	streamEnded func(error)
}

var _ historyv1.HistoryServiceServer = (*HistoryServer)(nil)

// NewHistoryServer returns the HistoryService handlers over st; a nil logger means zap.NewNop();
// opts configure WatchBranch streams.
func NewHistoryServer(st store.Store, logger *zap.Logger, opts ...StreamOption) *HistoryServer {
	if logger == nil {
		logger = zap.NewNop()
	}
	hs := &HistoryServer{store: st, logger: logger, streams: newStreamConfig(opts), stopping: make(chan struct{})}
	hs.now = hs.streams.now
	hs.setBounds(DefaultMaxResponseBytes, DefaultMaxRenderedBytes, DefaultMaxImportBytes)
	hs.maxAppendWindow = DefaultAppendMaxWindow
	return hs
}

// setBounds sets the response budget (which also bounds WatchBranch frames), the render cap and
// the import limit.
func (s *HistoryServer) setBounds(response, rendered, imp int) {
	s.maxResponse, s.maxFrame, s.maxRendered, s.maxImport = response, response, rendered, imp
	s.frames[0].maxRendered, s.frames[1].maxRendered = rendered, rendered
}

// out is how this server converts messages: under its render cap, rendered unless omit.
func (s *HistoryServer) out(omit bool) messageOut {
	return messageOut{maxRendered: s.maxRendered, omitRendered: omit}
}

// RegisterHistory registers the HistoryService handlers over st on s and ends their WatchBranch
// streams when s shuts down. Call it before s.Serve.
func RegisterHistory(s *Server, st store.Store, opts ...StreamOption) *HistoryServer {
	hs := NewHistoryServer(st, s.logger, opts...)
	hs.setBounds(s.limits.MaxResponseBytes, s.limits.MaxRenderedBytes, s.limits.MaxImportBytes)
	hs.maxAppendWindow = s.limits.MaxAppendWindow
	hs.encodeFrames = true // New installs requestCodec
	historyv1.RegisterHistoryServiceServer(s.GRPCServer(), hs)
	s.OnShutdown(hs.EndStreams)
	// issue 19: the service has its own health status, SERVING from now until Shutdown sets every
	// status to NOT_SERVING with the whole server's.
	s.Health().SetServingStatus(historyv1.HistoryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if sh, ok := st.(storageHealth); ok {
		s.followStorage(sh, historyv1.HistoryService_ServiceDesc.ServiceName)
	}
	return hs
}

// EndStreams ends every WatchBranch stream, open or opened later, with UNAVAILABLE (reason
// SERVER_SHUTTING_DOWN) and the stream's cursor, so that GracefulStop need not wait for them. It is
// the OnShutdown hook RegisterHistory installs; safe to call more than once.
func (s *HistoryServer) EndStreams() { s.stopOnce.Do(func() { close(s.stopping) }) }

// recall answers a repeated request id from the store's record: ok is true when res holds the
// first call's result. With branch nil the scope is the caller's (ADR-0010). A request id holding
// U+0000 is refused first (checkRequestID): every mutation asks here before anything else.
func recall[T any](ctx context.Context, st store.Store, branch *uuid.UUID, op store.Op, requestID string) (res T, ok bool, err error) {
	if err := checkRequestID(requestID); err != nil {
		return res, false, err
	}
	principal := ""
	if branch == nil {
		principal = principalFromContext(ctx)
	}
	r, ok, err := st.Recall(ctx, principal, branch, op, requestID)
	if err != nil || !ok {
		return res, false, err
	}
	res, ok = r.(T)
	if !ok {
		return res, false, fmt.Errorf("store recalled a %T for %s", r, op)
	}
	return res, true, nil
}

// checkRequestID refuses a request id holding U+0000 (INVALID_ARGUMENT, field request_id) on every
// engine: the database engines keep it in a text column, which PostgreSQL's TEXT cannot hold NUL
// in (docs/decisions/0012 row 24). No call was ever remembered under such an id, so refusing it
// before the repeat check answers no retry differently.
func checkRequestID(id string) error { return envelope.CheckNoNUL("request_id", id) }

// committed drops the observer failures of a committed write: they are logged, and the gRPC
// caller, whose write stands, is not told (docs/design.md#observers).
func (s *HistoryServer) committed(method string, err error) error {
	if errors.Is(err, store.ErrObserver) {
		s.logger.Warn("message-added observers failed after a committed write", zap.String("grpc.method", method), zap.Error(err))
		return nil
	}
	return err
}

// CreateBranch creates a branch (HistoryService.CreateBranch).
func (s *HistoryServer) CreateBranch(ctx context.Context, req *historyv1.CreateBranchRequest) (*historyv1.CreateBranchResponse, error) {
	if r, ok, err := recall[store.BranchResult](ctx, s.store, nil, store.OpCreateBranch, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return createBranchResponse(r), nil
	}
	id, err := parseOptionalID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	meta, err := optionalStruct("metadata", req.GetMetadata())
	if err != nil {
		return nil, err
	}
	in := store.CreateBranchInput{ID: id, Name: req.Name, User: req.User, Metadata: meta, SystemSender: req.SystemSender,
		RequestID: req.GetRequestId(), Principal: principalFromContext(ctx)}
	if req.GetSystem() != nil {
		in.System, in.SystemDatetime = systemText(req.GetSystem()), systemDatetime(req.GetSystem())
	}
	res, err := s.store.CreateBranch(ctx, in)
	if err != nil {
		return nil, err
	}
	return createBranchResponse(res), nil
}

func createBranchResponse(r store.BranchResult) *historyv1.CreateBranchResponse {
	resp := &historyv1.CreateBranchResponse{Branch: branchToProto(r.Branch)}
	for _, m := range r.Messages {
		if m.Message.Kind() == envelope.KindSystem {
			resp.System = messageOut{}.stored(m)
		}
	}
	return resp
}

// GetBranch describes a branch (HistoryService.GetBranch).
func (s *HistoryServer) GetBranch(ctx context.Context, req *historyv1.GetBranchRequest) (*historyv1.GetBranchResponse, error) {
	id, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	b, err := s.store.GetBranch(ctx, id)
	if err != nil {
		return nil, err
	}
	return &historyv1.GetBranchResponse{Branch: branchToProto(b)}, nil
}

// ListBranches lists the branches (HistoryService.ListBranches).
func (s *HistoryServer) ListBranches(ctx context.Context, req *historyv1.ListBranchesRequest) (*historyv1.ListBranchesResponse, error) {
	page, err := s.store.ListBranches(ctx, int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &historyv1.ListBranchesResponse{NextPageToken: page.NextPageToken}
	budget := newPageBudget(s.maxResponse)
	for i, b := range page.Branches {
		pb := branchToProto(b)
		if n := proto.Size(pb); !budget.add(fieldSize(1, n)) {
			if i == 0 {
				return nil, &responseTooLargeError{what: fmt.Sprintf("branch %s", b.ID), size: n + responseFixedBytes, limit: s.maxResponse,
					hint: "its metadata is too large to list; read it with GetBranch", ids: map[string]string{"branchId": b.ID.String()}}
			}
			resp.NextPageToken = page.TokenAfter(i)
			break
		}
		resp.Branches = append(resp.Branches, pb)
	}
	return resp, nil
}

// DeleteBranch deletes a branch (HistoryService.DeleteBranch).
func (s *HistoryServer) DeleteBranch(ctx context.Context, req *historyv1.DeleteBranchRequest) (*historyv1.DeleteBranchResponse, error) {
	id, err := parseID("branch_id", req.GetBranchId()) // a delete's request id is remembered per branch
	if err != nil {
		return nil, err
	}
	if r, ok, err := recall[store.DeleteResult](ctx, s.store, &id, store.OpDeleteBranch, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return deleteBranchResponse(r), nil
	}
	res, err := s.store.DeleteBranch(ctx, id, writeOptions(req.GetRequestId(), req.ExpectedHeadSequence))
	if err != nil {
		return nil, err
	}
	return deleteBranchResponse(res), nil
}

func deleteBranchResponse(r store.DeleteResult) *historyv1.DeleteBranchResponse {
	return &historyv1.DeleteBranchResponse{BranchId: r.BranchID.String(), LastSequence: r.LastSequence}
}

// ForkBranch copies a branch into a new one (HistoryService.ForkBranch).
func (s *HistoryServer) ForkBranch(ctx context.Context, req *historyv1.ForkBranchRequest) (*historyv1.ForkBranchResponse, error) {
	if r, ok, err := recall[store.BranchResult](ctx, s.store, nil, store.OpForkBranch, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return &historyv1.ForkBranchResponse{Branch: branchToProto(r.Branch)}, nil
	}
	src, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	in := store.ForkInput{Source: src, Name: req.Name, ExpectedHead: req.ExpectedHeadSequence,
		RequestID: req.GetRequestId(), Principal: principalFromContext(ctx)}
	if req.GetMessageId() != "" {
		at, err := parseID("message_id", req.GetMessageId())
		if err != nil {
			return nil, err
		}
		in.At = &at
	}
	if in.ID, err = parseOptionalID("new_branch_id", req.GetNewBranchId()); err != nil {
		return nil, err
	}
	res, err := s.store.ForkBranch(ctx, in)
	if err != nil {
		return nil, err
	}
	return &historyv1.ForkBranchResponse{Branch: branchToProto(res.Branch)}, nil
}

// ImportBranch creates a branch from LionAGI JSON text (HistoryService.ImportBranch).
func (s *HistoryServer) ImportBranch(ctx context.Context, req *historyv1.ImportBranchRequest) (*historyv1.ImportBranchResponse, error) {
	if r, ok, err := recall[store.BranchResult](ctx, s.store, nil, store.OpImportBranch, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return &historyv1.ImportBranchResponse{Branch: branchToProto(r.Branch)}, nil
	}
	id, err := parseOptionalID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	metaKey, err := dbMetaKeyFromProto(req.GetDbMetaKey())
	if err != nil {
		return nil, err
	}
	data, err := jsonv.ParseDepth([]byte(req.GetData()), store.ImportMaxDepth)
	if err != nil {
		return nil, &FieldError{Field: "data", Err: fmt.Errorf("%w: not JSON: %v", envelope.ErrInvalid, err)}
	}
	res, err := s.store.ImportBranch(ctx, store.ImportInput{Data: data, ID: id, NewID: req.GetNewBranchId(), DBMetaKey: metaKey,
		RequestID: req.GetRequestId(), Principal: principalFromContext(ctx)})
	if err != nil {
		return nil, err
	}
	return &historyv1.ImportBranchResponse{Branch: branchToProto(res.Branch)}, nil
}

// ExportBranch writes a branch as LionAGI JSON text (HistoryService.ExportBranch).
func (s *HistoryServer) ExportBranch(ctx context.Context, req *historyv1.ExportBranchRequest) (*historyv1.ExportBranchResponse, error) {
	id, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	mode, err := modeFromProto(req.GetMode())
	if err != nil {
		return nil, err
	}
	metaKey, err := dbMetaKeyFromProto(req.GetDbMetaKey())
	if err != nil {
		return nil, err
	}
	// Each message's share of the text is counted as the store reads it, and the read stops at the
	// first past the budget: refusing a big branch costs about the budget, not the branch, and
	// reports what it counted, a lower bound of the export's size (docs/decisions/0008).
	counted := responseFixedBytes
	exp, err := s.store.ExportBranch(ctx, id, store.ExportInput{Mode: mode, DBMetaKey: metaKey,
		Each: func(i int, m *envelope.Message) error {
			if i == 0 {
				counted = responseFixedBytes // the store's read started again
			}
			n, err := store.ExportedLen(m, mode)
			if err != nil {
				return err
			}
			if counted += n; counted > s.maxResponse {
				return &responseTooLargeError{what: fmt.Sprintf("the export of branch %s", id), size: counted, limit: s.maxResponse, atLeast: true,
					hint: "read it with ExportBranchStream", ids: map[string]string{"branchId": id.String()}}
			}
			return nil
		}})
	if err != nil {
		return nil, err
	}
	// The text's size is known before the text is built (issue 11: never build a response to find
	// that it is too large).
	if n := jsonv.EncodedLen(exp.Data) + responseFixedBytes; n > s.maxResponse {
		return nil, &responseTooLargeError{what: fmt.Sprintf("the export of branch %s", id), size: n, limit: s.maxResponse,
			hint: "read it with ExportBranchStream", ids: map[string]string{"branchId": id.String()}}
	}
	return &historyv1.ExportBranchResponse{Data: exp.Data.String(), HeadSequence: exp.Head}, nil
}
