package server

import (
	"errors"
	"fmt"
	"io"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// ExportBranchStream sends ExportBranch's JSON text in chunks (HistoryService.ExportBranchStream),
// for a branch whose export is larger than the response budget (issue 11). The text is encoded
// once and sent as slices of itself: the server holds one copy of the export's text (about the
// branch's JSON size) until the stream ends, and each frame is at most exportChunkBytes of data.
// That copy is reserved from the in-flight budget (--max-inflight-bytes) while it is sent; a stream
// whose text does not fit is refused, RESOURCE_EXHAUSTED INFLIGHT_BUDGET_EXCEEDED with figures.
func (s *HistoryServer) ExportBranchStream(req *historyv1.ExportBranchStreamRequest, stream historyv1.HistoryService_ExportBranchStreamServer) error {
	id, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return err
	}
	mode, err := modeFromProto(req.GetMode())
	if err != nil {
		return err
	}
	metaKey, err := dbMetaKeyFromProto(req.GetDbMetaKey())
	if err != nil {
		return err
	}
	// Not bounded by the response budget: the stream is how a branch past it is read.
	exp, err := s.store.ExportBranch(stream.Context(), id, store.ExportInput{Mode: mode, DBMetaKey: metaKey})
	if err != nil {
		return err
	}
	text := jsonv.Marshal(exp.Data)
	exp.Data = jsonv.Value{} // the tree is no longer needed while the text is sent
	if b := budgetFrom(stream.Context()); b != nil {
		// The text is held until the last frame is sent: it counts against --max-inflight-bytes
		// like a request being read, and a stream it does not fit is refused (issue 11 review).
		r, err := b.reserveBytes(int64(len(text)))
		if err != nil {
			return err
		}
		defer r.release()
	}
	chunk := min(exportChunkBytes, max(s.maxResponse-responseFixedBytes, 1))
	for off := 0; off < len(text); off += chunk {
		end := min(off+chunk, len(text))
		if err := stream.Send(&historyv1.ExportBranchStreamResponse{Data: text[off:end], HeadSequence: exp.Head}); err != nil {
			return err
		}
	}
	return nil
}

// ImportBranchStream reads ImportBranch's JSON text in chunks (HistoryService.ImportBranchStream):
// the first message carries the options, every message a chunk of data. The payload is bounded by
// the import limit (--max-import-bytes), checked as each chunk arrives, so a larger one is refused
// having cost at most the limit; nothing is written until the client has sent it all. The buffer
// counts against the in-flight budget (--max-inflight-bytes): the call's reservation, taken by the
// tap for one message, grows by the buffer's size as chunks arrive, and a call whose buffer does
// not fit is refused, RESOURCE_EXHAUSTED INFLIGHT_BUDGET_EXCEEDED with figures; all of it is given
// back when the call ends.
func (s *HistoryServer) ImportBranchStream(stream historyv1.HistoryService_ImportBranchStreamServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return &FieldError{Field: "data", Err: fmt.Errorf("%w: the stream ended before its first message", envelope.ErrInvalid)}
	}
	if err != nil {
		return err
	}
	ctx := stream.Context()
	if r, ok, err := recall[store.BranchResult](ctx, s.store, nil, store.OpImportBranch, first.GetRequestId()); err != nil {
		return err
	} else if ok {
		return stream.SendAndClose(&historyv1.ImportBranchStreamResponse{Branch: branchToProto(r.Branch)})
	}
	id, err := parseOptionalID("branch_id", first.GetBranchId())
	if err != nil {
		return err
	}
	metaKey, err := dbMetaKeyFromProto(first.GetDbMetaKey())
	if err != nil {
		return err
	}
	data := append([]byte(nil), first.GetData()...)
	r := reservationFrom(ctx) // per bytes (--max-recv-msg-size) from the tap, for the message being read
	for {
		if len(data) > s.maxImport {
			return &importTooLargeError{size: len(data), limit: s.maxImport}
		}
		if r != nil {
			// The buffer is held beside the message being read: the call holds both.
			if err := r.grow(r.b.per + int64(cap(data)) - r.held()); err != nil {
				return err
			}
		}
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if msg.GetRequestId() != "" || msg.GetBranchId() != "" || msg.GetNewBranchId() || msg.GetDbMetaKey() != "" {
			return &FieldError{Field: "request_id", Err: fmt.Errorf("%w: the options go in the first message only", envelope.ErrInvalid)}
		}
		data = append(data, msg.GetData()...)
	}
	parsed, err := jsonv.Parse(data)
	if err != nil {
		return &FieldError{Field: "data", Err: fmt.Errorf("%w: not JSON: %v", envelope.ErrInvalid, err)}
	}
	res, err := s.store.ImportBranch(ctx, store.ImportInput{Data: parsed, ID: id, NewID: first.GetNewBranchId(), DBMetaKey: metaKey, RequestID: first.GetRequestId(),
		Principal: principalFromContext(ctx)})
	if err != nil {
		return err
	}
	return stream.SendAndClose(&historyv1.ImportBranchStreamResponse{Branch: branchToProto(res.Branch)})
}
