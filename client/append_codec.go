package client

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// encodedItem is an AppendMessagesRequest carrying one item, already marshalled. Append encodes
// each item before it takes a place in the window, so that one that cannot be encoded (a string
// that is not UTF-8) fails alone, with INVALID_ARGUMENT: gRPC ends the whole stream when it cannot
// marshal a message it is asked to send, and every item in flight would get a
// *StreamBrokenError. The encoding moves from the stream's Send to Append; it is not done twice.
//
// What that changes on the wire and around it: the stream's content-type is
// application/grpc+proto (a codec forced on a call names its subtype; the gRPC spec allows both),
// and a stream interceptor or stats handler given to Dial sees each item as an encodedItem (its
// bytes), not as an *AppendMessagesRequest; the stream's first message, the window, is a proto
// message as before.
type encodedItem struct{ buf mem.Buffer }

// itemField is AppendMessagesRequest.item's field number.
const itemField = 2

// encodeItem marshals AppendMessagesRequest{Item: req} into a buffer of gRPC's default pool, as
// its proto codec does: the transport frees it once written.
func encodeItem(req *historyv1.AddMessageRequest) (encodedItem, error) {
	n := proto.Size(req)
	size := 1 + protowire.SizeVarint(uint64(n)) + n
	pool := mem.DefaultBufferPool()
	bp := pool.Get(size)
	b := protowire.AppendTag((*bp)[:0], itemField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, req)
	if err != nil {
		pool.Put(bp)
		return encodedItem{}, err
	}
	*bp = b
	return encodedItem{mem.NewBuffer(bp, pool)}, nil
}

// appendCodec is the proto codec, except that an encodedItem is sent as its buffer (each is sent
// once; the transport frees it).
type appendCodec struct{ proto encoding.CodecV2 }

func newAppendCodec() appendCodec { return appendCodec{encoding.GetCodecV2(grpcproto.Name)} }

func (c appendCodec) Marshal(v any) (mem.BufferSlice, error) {
	if it, ok := v.(encodedItem); ok {
		return mem.BufferSlice{it.buf}, nil
	}
	return c.proto.Marshal(v)
}

func (c appendCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (appendCodec) Name() string { return grpcproto.Name }
