// Decodes the google.rpc.Status that a gRPC server sends in the grpc-status-details-bin trailer and
// finds its google.rpc.ErrorInfo (DESIGN.md "Errors": every non-OK status carries one, domain
// "historyd"). The protobuf wire format of these three small messages is read by hand so that the
// test needs no googleapis .proto files and no package beyond @grpc/grpc-js and @grpc/proto-loader:
//
//   google.rpc.Status    { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
//   google.protobuf.Any  { string type_url = 1; bytes value = 2; }
//   google.rpc.ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }

const errorInfoType = 'type.googleapis.com/google.rpc.ErrorInfo';

/** Reads the fields of one protobuf message: a list of [fieldNumber, value] where value is a
 * number (varint) or a Buffer (length-delimited). Other wire types are an error: these messages
 * have none. */
function fields(buf) {
  const out = [];
  let i = 0;
  const varint = () => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (i >= buf.length) throw new Error('rpcstatus: truncated varint');
      const b = buf[i++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const field = key >>> 3;
    switch (key & 7) {
      case 0:
        out.push([field, Number(varint())]);
        break;
      case 2: {
        const n = Number(varint());
        if (i + n > buf.length) throw new Error('rpcstatus: truncated field');
        out.push([field, buf.subarray(i, i + n)]);
        i += n;
        break;
      }
      default:
        throw new Error(`rpcstatus: unexpected wire type ${key & 7}`);
    }
  }
  return out;
}

/** Returns the ErrorInfo ({reason, domain, metadata}) in a serialized google.rpc.Status, or
 * undefined when it has none. */
export function decodeErrorInfo(statusBytes) {
  for (const [field, any] of fields(Buffer.from(statusBytes))) {
    if (field !== 3) continue;
    let typeUrl = '';
    let value = Buffer.alloc(0);
    for (const [f, v] of fields(any)) {
      if (f === 1) typeUrl = v.toString('utf8');
      if (f === 2) value = v;
    }
    if (typeUrl !== errorInfoType) continue;
    const info = { reason: '', domain: '', metadata: {} };
    for (const [f, v] of fields(value)) {
      if (f === 1) info.reason = v.toString('utf8');
      if (f === 2) info.domain = v.toString('utf8');
      if (f === 3) {
        let k = '';
        let val = '';
        for (const [ef, ev] of fields(v)) {
          if (ef === 1) k = ev.toString('utf8');
          if (ef === 2) val = ev.toString('utf8');
        }
        info.metadata[k] = val;
      }
    }
    return info;
  }
  return undefined;
}
