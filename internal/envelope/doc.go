// Package envelope is historyd's domain heart: the LionAGI message envelope
// in plain Go, exact to ADR-0001 (Element identity and serialization) and
// ADR-0006 (message envelope), and to the outputs recorded from LionAGI
// 0.27.0 in testdata/lionagi-0.27.0/.
//
// It owns Element identity (UUID, created_at, metadata), Message with its
// class-fixed role, sender/recipient normalisation, the five typed contents
// and the generic content, the closed lion_class registry, the LionAGI JSON
// codec (python, json and db modes) and rendering (rendered text, chat_msg).
//
// Subpackages: jsonv keeps JSON exactly as written (key order, number
// literals); pyfmt renders values as Python and PyYAML would.
//
// Import rule (docs/design.md#layers): envelope imports none of historyd's other
// packages, and no grpc, protobuf or zap. Everything it returns for bad input
// is an error value (never a panic) that internal/server maps to
// INVALID_ARGUMENT.
package envelope
