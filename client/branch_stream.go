package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// ImportChunkBytes is the data ImportBranchReader sends per message: 1 MiB, well below the server's
// default request limit (--max-recv-msg-size, 4 MiB).
const ImportChunkBytes = 1 << 20

// ExportBranchAll reads a branch's whole LionAGI export through ExportBranchStream and returns its
// JSON text: the same text as ExportBranch, for a branch of any size (ExportBranch is refused with
// RESOURCE_EXHAUSTED, ERROR_REASON_RESPONSE_TOO_LARGE, past the server's response budget). The
// text is held in memory; ExportBranchTo writes it to an io.Writer instead.
func (c *Client) ExportBranchAll(ctx context.Context, req *historyv1.ExportBranchStreamRequest) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := c.ExportBranchTo(ctx, req, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ExportBranchTo writes a branch's whole LionAGI export to w, chunk by chunk as ExportBranchStream
// sends it, and returns the branch's head sequence when it was read. On error w may hold part of
// the text. Streams are not retried: call it again.
func (c *Client) ExportBranchTo(ctx context.Context, req *historyv1.ExportBranchStreamRequest, w io.Writer) (head uint64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if w fails
	stream, err := c.History.ExportBranchStream(ctx, req)
	if err != nil {
		return 0, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return head, nil
		}
		if err != nil {
			return 0, err
		}
		head = resp.GetHeadSequence()
		if _, err := w.Write(resp.GetData()); err != nil {
			return 0, fmt.Errorf("client: export of branch %s: %w", req.GetBranchId(), err)
		}
	}
}

// ImportBranchReader imports the LionAGI JSON text read from r through ImportBranchStream, in
// chunks of ImportChunkBytes: first carries the options (request_id, branch_id, new_branch_id,
// db_meta_key; its data is ignored) and may be nil. The options are sent at once, then each chunk
// as r gives it: the server's --stream-idle-timeout (2 minutes by default) bounds the wait for each,
// so r must give ImportChunkBytes within it. The payload may be as large as the server's
// --max-import-bytes (256 MiB by default), unlike ImportBranch's, which --max-recv-msg-size bounds.
// Streams are not retried; set a request_id in first to make a repeat safe.
func (c *Client) ImportBranchReader(ctx context.Context, first *historyv1.ImportBranchStreamRequest, r io.Reader) (*historyv1.ImportBranchStreamResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if r fails
	stream, err := c.History.ImportBranchStream(ctx)
	if err != nil {
		return nil, err
	}
	msg := &historyv1.ImportBranchStreamRequest{}
	if first != nil {
		msg = proto.CloneOf(first)
		msg.Data = nil
	}
	// The options go at once, before the first chunk is read: the server ends a stream whose first
	// message has not come within --request-body-timeout, and r may be slow (a pipe, a download).
	// After that, each chunk must come within --stream-idle-timeout of the last.
	if err := stream.Send(msg); err != nil && !errors.Is(err, io.EOF) { // io.EOF: CloseAndRecv has the status
		return nil, err
	} else if err == nil {
		for {
			buf := make([]byte, ImportChunkBytes) // a new one each time: grpc may use a sent message lazily
			n, rerr := io.ReadFull(r, buf)
			if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("client: import: reading the payload: %w", rerr)
			}
			if n > 0 {
				if err := stream.Send(&historyv1.ImportBranchStreamRequest{Data: buf[:n]}); err != nil {
					if errors.Is(err, io.EOF) { // the server ended the call: CloseAndRecv has its status
						break
					}
					return nil, err
				}
			}
			if rerr != nil {
				break
			}
		}
	}
	return stream.CloseAndRecv()
}
