// Package pyfmt renders JSON values as text exactly as LionAGI 0.27.0's
// Python code does, so that historyd's prompts are byte-identical to
// LionAGI's (docs/design.md#generic-content, "Generic (base Message) content renders as Python's
// str()"; ADR-0006 D2 and "Instruction rendering": typed contents render
// through the minimal-YAML renderer).
//
// It owns three renderings of a jsonv.Value, each read as Python's
// json.loads would read the JSON text (1 is int, 1.0 and 1e3 are float,
// a float literal too large for a double is inf, an integer literal of
// any size is an exact int):
//
//   - Str and Repr: Python's str() and repr() of that value, with
//     Python 3.11's quoting and escaping rules for strings;
//   - MinimalYAML and MinimalYAMLKeepEmpties: LionAGI's minimal_yaml(),
//     that is PyYAML 6's yaml.dump of the (pruned) value with LionAGI's
//     dumper settings, reproduced down to quoting, block scalars and the
//     "..." document end.
//
// The golden files under testdata/ were written by Python itself (the
// generators live in testdata/gen/); the tests never need Python.
//
// pyfmt imports only the standard library and jsonv. It must not import
// any other historyd package: it is a leaf that the envelope composes.
package pyfmt
