package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// DefaultAppendMaxWindow is the default cap on an AppendMessages window (--append-max-window): 256
// items is four windows of 64, the size at which the sqlite engine's group commit has most of its
// gain (docs/development.md#toolchain: ≈18k writes/s in transactions of 64 against ≈1.5k alone),
// and at most 256 requests held per stream, each already counted in the in-flight budget.
const DefaultAppendMaxWindow = 256

// AppendMessages is AddMessage pipelined (HistoryService.AppendMessages, issue 21). Three
// goroutines, all owned by the handler:
//
//   - the receiver (appendReceiver.run) reads items, takes a place in the window for each, starts
//     it (on the store's ordered queue when the store is a store.Pipeliner, else on a goroutine
//     that waits for the stream's previous item on the same branch), and queues its answer;
//   - the handler's own goroutine answers the queued items in the order received: it waits for
//     each item's result, sends it (with the answers queued behind it that are ready too, in one
//     handoff: answer), and frees its place in the window;
//   - per item, on a store that is no Pipeliner, one goroutine (appendLanes).
//
// The receiver stops reading while the window is full, so the client's sends block in HTTP/2 flow
// control: memory is bounded by the window, and the requests held count against the in-flight
// budget. Answers go out through a streamSender (stream.go), as the watch streams' frames do: a
// client that keeps sending but stops reading cannot hold the handler in Send, which ends the
// stream too slow (RESOURCE_EXHAUSTED SUBSCRIBER_TOO_SLOW) after the send timeout, or at shutdown
// (UNAVAILABLE SERVER_SHUTTING_DOWN) at once. The handler returns once every item it took has been
// answered (or waited for, when the stream is over), so no item's goroutine outlives it; the
// receiver, and a first Recv given up on at shutdown, end at their next Recv, which the handler's
// return unblocks (as streamSender's goroutine does).
func (s *HistoryServer) AppendMessages(stream historyv1.HistoryService_AppendMessagesServer) error {
	select {
	case <-s.stopping: // a stream opened after EndStreams ends at once, as a watch does
		return errShuttingDown
	default:
	}
	ctx := stream.Context()
	first, err, ok := s.firstAppend(stream)
	switch {
	case !ok:
		return errShuttingDown
	case errors.Is(err, io.EOF):
		return nil
	case err != nil && !isMalformed(err):
		return err
	}
	window := s.maxAppendWindow
	if w := int(first.GetWindow()); w > 0 && w < window {
		window = w
	}
	out := newStreamSender(stream, s.streams.sendTimeout)
	defer out.close()
	r := &appendReceiver{
		s: s, stream: stream, out: out, ctx: ctx, res: reservationFrom(ctx),
		slots: make(chan struct{}, window), queue: make(chan appendItem, window), stop: make(chan struct{}),
	}
	if _, ok := s.store.(store.Pipeliner); !ok {
		r.lanes = appendLanes{}
	}
	_, r.applied = s.store.(store.AppliedPipeliner)
	go r.run(first, err)

	for {
		// Shutdown first: once EndStreams has run, no item is answered, even one already queued
		// (a select with both ready picks either; TestAppenderStreamBroken saw an item answered
		// OK after EndStreams, about one run in 600 under load).
		select {
		case <-s.stopping:
			return r.end(errSendAborted)
		default:
		}
		select {
		case it, ok := <-r.queue:
			if !ok {
				return r.recvErr
			}
			if err := r.answer(it); err != nil {
				return r.end(err)
			}
		case <-s.stopping:
			// Shutdown: take no more items, wait for the ones taken, end UNAVAILABLE
			// (SERVER_SHUTTING_DOWN): the client resends what got no answer. Answers still
			// queued are not sent: a send could block on a client that stopped reading.
			return r.end(errSendAborted)
		case <-ctx.Done():
			// The stream is over: revoked (ADR-0009: the revocation interceptor turns this end
			// into TOKEN_REVOKED), cancelled by its client or past its deadline. As at shutdown,
			// no queued answer is sent and the items taken are waited for.
			return r.end(ctx.Err())
		}
	}
}

// firstAppend is the stream's first Recv, on a goroutine of its own so that shutdown ends a stream
// whose client opened it and sent nothing (issue 21 review: the handler blocked in Recv could not
// see s.stopping). ok is false when shutdown came first; the goroutine then ends at once, as the
// handler's return ends the stream and so unblocks Recv.
func (s *HistoryServer) firstAppend(stream historyv1.HistoryService_AppendMessagesServer) (msg *historyv1.AppendMessagesRequest, err error, ok bool) {
	type recvd struct {
		msg *historyv1.AppendMessagesRequest
		err error
	}
	got := make(chan recvd, 1) // room: the goroutine never waits for a handler that left
	go func() {
		m, err := stream.Recv()
		got <- recvd{m, err}
	}()
	select {
	case g := <-got:
		return g.msg, g.err, true
	case <-s.stopping:
		return nil, nil, false
	}
}

// appendItem is one item taken: its answer, waited for in order.
type appendItem struct {
	index uint64
	bytes int64 // what it holds of the call's in-flight reservation
	wait  func() *historyv1.AppendMessagesResponse
	ready bool // wait returns at once: the answer is known (a failure, a repeat, a store that applies in the call)
}

// appendReceiver is the receiving side of one AppendMessages stream.
type appendReceiver struct {
	s      *HistoryServer
	stream historyv1.HistoryService_AppendMessagesServer
	out    *streamSender // sends the answers, bounded by the send timeout and cut short by shutdown
	ctx    context.Context
	res    *reservation // the call's in-flight reservation, grown by the items held; nil without the tap

	slots   chan struct{}   // the window: a place per item in flight
	queue   chan appendItem // the items taken, in order; closed when the receiver ends
	lanes   appendLanes     // nil when the store is a Pipeliner
	ids     appendIDs       // the request ids of the items in flight (history_append_ids.go)
	applied bool            // the store is a store.AppliedPipeliner: its items' answers are ready once started

	// The handler's: the items of the answers being sent, and the answers (reused).
	items  []appendItem
	frames []any

	mu      sync.Mutex // orders halt against queueing an item
	halted  bool
	stop    chan struct{} // closed by halt
	recvErr error         // why the receiver ended (nil: the client closed its side); set on its goroutine, read after queue closes
}

// run reads and starts items until the client closes its side, Recv fails or halt; first is the
// stream's first message (and the error its Recv returned).
func (r *appendReceiver) run(first *historyv1.AppendMessagesRequest, firstErr error) {
	defer close(r.queue)
	var index uint64
	msg, err := first, firstErr
	for {
		if err != nil && !isMalformed(err) {
			if !errors.Is(err, io.EOF) {
				r.recvErr = err
			}
			return
		}
		if err != nil || msg.GetItem() != nil { // a message without an item is the window only
			select {
			case r.slots <- struct{}{}:
			case <-r.stop:
				return
			}
			if !r.take(index, msg.GetItem(), err) {
				return
			}
			index++
		}
		msg, err = r.stream.Recv()
	}
}

// take starts one item (or answers a request that did not decode, malformed) and queues it; false
// once halted, when the item is dropped unstarted.
func (r *appendReceiver) take(index uint64, req *historyv1.AddMessageRequest, malformed error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.halted {
		<-r.slots
		return false
	}
	if err := r.ctx.Err(); err != nil {
		// The stream ended (a revocation among the ways) after Recv returned the item: it is
		// not started, as nothing read after a revocation may be written (ADR-0009).
		<-r.slots
		r.recvErr = err
		return false
	}
	it := appendItem{index: index, ready: true}
	switch {
	case malformed != nil:
		it.wait = r.failed(index, malformed)
	default:
		if r.res != nil {
			it.bytes = int64(proto.Size(req))
		}
		if err := r.res.grow(it.bytes); err != nil {
			it.bytes, it.wait = 0, r.failed(index, err)
			break
		}
		it.wait, it.ready = r.startSafe(index, req)
	}
	r.queue <- it // room: the queue is as long as the window
	return true
}

// halt stops the receiver taking items; once it returns, the queue holds every item taken.
func (r *appendReceiver) halt() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.halted {
		r.halted = true
		close(r.stop)
	}
}

// answer waits for an item's result and sends it, with the answers of the items queued behind it
// that are ready now (appendItem.ready), in order and in one handoff to the streamSender: on the
// memory engine a window's answers are all ready as soon as they are queued, and handing them over
// one at a time cost a goroutine switch each way per item. An item whose answer is not ready
// (a write in progress) is not waited for while answers before it are ready: those are sent
// first. Sent answers free their items' places and bytes. After an error the stream is over: the
// handler must not send again (streamSender).
func (r *appendReceiver) answer(it appendItem) error {
	items, frames := r.items[:0], r.frames[:0]
	for {
		items = append(items, it)
		frames = append(frames, r.resolve(it))
		if len(items) == cap(r.slots) || len(r.queue) == 0 {
			break
		}
		it = <-r.queue // only this goroutine receives: the item counted is there
		if !it.ready {
			if err := r.flush(items, frames); err != nil {
				it.wait() // taken from the queue: end does not see it
				r.release(it)
				return err
			}
			items, frames = items[:0], frames[:0]
		}
	}
	return r.flush(items, frames)
}

// resolve waits for an item's answer.
func (r *appendReceiver) resolve(it appendItem) any {
	resp := it.wait()
	resp.Index = it.index
	return resp
}

// flush sends the answers of items and frees their places and bytes.
func (r *appendReceiver) flush(items []appendItem, frames []any) error {
	err := r.out.sendAll(frames, nil, r.s.stopping)
	for _, it := range items {
		r.release(it)
	}
	if err == nil { // else the streamSender's goroutine may still read frames, and the stream is over
		clear(frames) // hold no answer until the next batch
		r.items, r.frames = items[:0], frames[:0]
	}
	return err
}

// release frees an answered item's place in the window and its bytes.
func (r *appendReceiver) release(it appendItem) {
	r.res.shrink(it.bytes)
	<-r.slots
}

// end ends a stream that cannot send again (a send failed, timed out or was aborted) or is shutting
// down: it halts the receiver and waits for every item taken, unsent, so that no item's write
// outlives the handler; it returns the stream's end for the send's error.
func (r *appendReceiver) end(sendErr error) error {
	r.halt()
	for len(r.queue) > 0 { // after halt, nothing more is queued
		it := <-r.queue
		it.wait()
		r.release(it)
	}
	switch {
	case errors.Is(sendErr, errSendTimeout):
		return tooSlow(sendErr, nil) // the watch streams' end for a client that does not read
	case errors.Is(sendErr, errSendAborted):
		return errShuttingDown
	}
	return sendErr
}

// start starts one decoded item and returns the wait for its answer, and whether that returns at
// once. The repeat check and the conversion run here, in order; the write runs on the store's
// ordered queue, or on its lane.
func (r *appendReceiver) start(index uint64, req *historyv1.AddMessageRequest) (func() *historyv1.AppendMessagesResponse, bool) {
	s := r.s
	var earlier *appendID // the earlier items with the request id in flight before the repeat check
	p, resp, err := s.prepareAppend(r.ctx, req, func(branch uuid.UUID) {
		if id := req.GetRequestId(); id != "" {
			earlier = r.ids.earlier(appendKey{branch, id})
		}
	})
	switch {
	case resp != nil:
		return func() *historyv1.AppendMessagesResponse { return appendOK(resp) }, true
	case err != nil && p.recalled && earlier != nil:
		// The request is invalid, but an earlier item of the stream with the same request id was
		// not answered yet when the repeat check missed: a unary AddMessage sent after it would
		// get its first response. The answer waits until every earlier item is answered (answers
		// go in order) and, if one of them may have written the record, looks again
		// (history_append_ids.go).
		return func() *historyv1.AppendMessagesResponse {
			if !r.ids.mayHaveRecorded(earlier) {
				return r.itemError(index, err)
			}
			if again, rerr := s.recallAdd(r.ctx, p); again != nil {
				return appendOK(again)
			} else if rerr != nil {
				err = rerr
			}
			return r.itemError(index, err)
		}, false
	case err != nil:
		return r.failed(index, err), true
	}
	answered := func(a *historyv1.AppendMessagesResponse) *historyv1.AppendMessagesResponse { return a }
	if id := p.opts.RequestID; id != "" {
		key := appendKey{p.branch, id}
		e := r.ids.started(key)
		answered = func(a *historyv1.AppendMessagesResponse) *historyv1.AppendMessagesResponse {
			r.ids.answered(key, e, mayHaveWritten(a))
			return a
		}
	}
	if pl, ok := s.store.(store.Pipeliner); ok {
		wait := pl.AddMessageAsync(r.ctx, p.branch, p.in, p.opts)
		return func() *historyv1.AppendMessagesResponse {
			res, err := wait()
			return answered(r.result(index, p, res, err))
		}, r.applied
	}
	done := r.lanes.run(p.branch, func() (store.WriteResult, error) {
		return s.store.AddMessage(r.ctx, p.branch, p.in, p.opts)
	})
	return func() *historyv1.AppendMessagesResponse {
		o := <-done
		return answered(r.result(index, p, o.res, o.err))
	}, false
}

// startSafe is start, with a panic in it (conversion, the repeat check, the store's queueing)
// answered as the item's INTERNAL status: start runs on the receiver's goroutine, which the
// recovery interceptor does not cover, so an unrecovered panic would end the process (issue 21
// review, finding B).
func (r *appendReceiver) startSafe(index uint64, req *historyv1.AddMessageRequest) (wait func() *historyv1.AppendMessagesResponse, ready bool) {
	defer func() {
		if p := recover(); p != nil {
			wait, ready = r.failed(index, panicError(p)), true
		}
	}()
	return r.start(index, req)
}

// panicError is a recovered panic as an error with no status of its own, so toStatus answers it
// with the fixed INTERNAL status the recovery interceptor gives (internalStatus) and itemError
// logs it, with the stack, as the cause kept from the client.
func panicError(p any) error {
	return fmt.Errorf("panic in AppendMessages item: %v\n%s", p, debug.Stack())
}

// result is an item's answer from its write's result.
func (r *appendReceiver) result(index uint64, p addPrep, res store.WriteResult, err error) *historyv1.AppendMessagesResponse {
	resp, err := r.s.addResult(p, res, err)
	if err != nil {
		return r.itemError(index, err)
	}
	return appendOK(resp)
}

// failed is the wait of an item that failed before it started.
func (r *appendReceiver) failed(index uint64, err error) func() *historyv1.AppendMessagesResponse {
	return func() *historyv1.AppendMessagesResponse { return r.itemError(index, err) }
}

// itemError is an item's answer with err's status, as toStatus maps it for a unary call. The
// logging interceptor sees only the stream's end, so an error with a cause kept from the client
// (INTERNAL, a storage fault) is logged here, with the call's request id.
func (r *appendReceiver) itemError(index uint64, err error) *historyv1.AppendMessagesResponse {
	serr := toStatus(err)
	if re, ok := errors.AsType[*redactedError](serr); ok {
		r.s.logger.Error("AppendMessages item failed", zap.String("request_id", RequestID(r.ctx)),
			zap.Uint64("item", index), zap.String("grpc.code", re.st.Code().String()), zap.Error(re.cause))
	}
	st := statusProto(serr)
	return &historyv1.AppendMessagesResponse{Result: &historyv1.AppendMessagesResponse_Error{Error: &historyv1.ItemStatus{
		Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails(),
	}}}
}

func appendOK(resp *historyv1.AddMessageResponse) *historyv1.AppendMessagesResponse {
	return &historyv1.AppendMessagesResponse{Result: &historyv1.AppendMessagesResponse_Response{Response: resp}}
}

// appendLanes orders a stream's items by branch on a store that is no Pipeliner: an item's write
// starts once the stream's previous item on its branch has finished, and items on different
// branches run at once. It maps a branch to the done channel of its last item; the receiver
// alone uses it. At most a window of items run, each on a goroutine that ends with its write (the
// handler waits for every item before it returns).
type appendLanes map[uuid.UUID]chan struct{}

type appendOutcome struct {
	res store.WriteResult
	err error
}

// run starts fn after the branch's previous item and returns where its outcome will be.
func (l appendLanes) run(branch uuid.UUID, fn func() (store.WriteResult, error)) <-chan appendOutcome {
	prev := l[branch]
	done, out := make(chan struct{}), make(chan appendOutcome, 1)
	l[branch] = done
	l.prune()
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		out <- safeWrite(fn)
	}()
	return out
}

// safeWrite runs fn, with a panic in it (the store's AddMessage) turned into its error: fn runs on a
// lane goroutine, which the recovery interceptor does not cover (issue 21 review, finding B).
func safeWrite(fn func() (store.WriteResult, error)) (o appendOutcome) {
	defer func() {
		if p := recover(); p != nil {
			o = appendOutcome{err: panicError(p)}
		}
	}()
	res, err := fn()
	return appendOutcome{res, err}
}

// prune forgets the branches whose last item has finished, once the map holds more than a few:
// a stream over many branches must not grow it without bound.
func (l appendLanes) prune() {
	if len(l) < 64 {
		return
	}
	for b, done := range l {
		select {
		case <-done:
			delete(l, b)
		default:
		}
	}
}

// statusProto is err's status as a google.rpc.Status message.
func statusProto(err error) *spb.Status { return status.Convert(err).Proto() }

// isMalformed reports whether a Recv failed on a message that did not decode (malformed.go): the
// stream goes on, and the message fails as an item.
func isMalformed(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == historyv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST.String() {
			return true
		}
	}
	return false
}

// prepareAppend is prepareAdd for an item, with the repeat check left to the write when the
// request converts: the store checks a request id again, atomically, in the write itself
// (store.Store.Recall), and answers a repeat with the first result, so the check before it only
// matters for a request that does not convert, whose repeat must still get the first response
// (docs/design.md#branches: the repeat check comes before any other). Skipping it saves the
// stream a read per item before its write is queued, which on the sqlite engine kept the writer
// waiting for the receiver instead of gathering a window per commit. beforeRecall runs just
// before that repeat check, with the item's branch.
func (s *HistoryServer) prepareAppend(ctx context.Context, req *historyv1.AddMessageRequest, beforeRecall func(uuid.UUID)) (p addPrep, resp *historyv1.AddMessageResponse, err error) {
	p.req = req
	if p.branch, err = parseID("branch_id", req.GetBranchId()); err != nil {
		return p, nil, err
	}
	if err = checkRequestID(req.GetRequestId()); err != nil {
		return p, nil, err // as recall would refuse it
	}
	if p.in, err = addInputFromProto(req); err != nil {
		beforeRecall(p.branch)
		return s.prepareAdd(ctx, req) // the repeat check first, as the unary call does it
	}
	p.opts = writeOptions(req.GetRequestId(), req.ExpectedHeadSequence)
	p.recalled = true
	return p, nil, nil
}
