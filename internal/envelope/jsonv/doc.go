// Package jsonv holds JSON values exactly as a client wrote them: objects
// keep their key order and numbers keep their literal text, so an integer
// stays an integer and a float stays a float from input to storage, export
// and rendering.
//
// docs/design.md#any-json explains why: the
// minimal-YAML prompt rendering follows insertion order and prints 30 and
// 30.0 differently, so a decoded map[string]any would change the prompt a
// model sees. encoding/json cannot carry either property, hence this
// package.
//
// jsonv imports nothing of historyd's; it is the leaf every other package
// of the domain builds on.
package jsonv
