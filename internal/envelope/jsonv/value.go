package jsonv

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"unsafe"
)

// Kind names the JSON type of a Value.
type Kind uint8

// The JSON kinds. The zero Value is Null.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// String returns the kind's lower-case JSON name.
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "boolean"
	case Number:
		return "number"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is an immutable-by-convention JSON value. Callers that need to change
// a Value build a new one; slices returned by Elems and Members must not be
// modified (copy them first), because Values share structure freely.
//
// A Value is 16 bytes: the store keeps several per message (an
// Instruction's content holds three beside the message's metadata), and
// LionAGI payloads are mostly small scalars, so the layout is packed. Every
// kind keeps a pointer and a length instead of a string or slice header:
// the text of a string or number, the first element of an array or object
// (the capacity is never needed: values are not appended to).
type Value struct {
	p    unsafe.Pointer // String: the text; Number: the JSON literal; Array: the first Value; Object: the first Member
	n    uint32         // Bool: 1 for true; String, Number: the text's length; Array, Object: the length
	kind Kind
}

// Member is one key/value pair of an Object, in insertion order.
type Member struct {
	Key   string
	Value Value
}

// NullValue returns JSON null (the zero Value).
func NullValue() Value { return Value{} }

// BoolValue returns a JSON boolean.
func BoolValue(b bool) Value {
	if b {
		return Value{kind: Bool, n: 1}
	}
	return Value{kind: Bool}
}

// StringValue returns a JSON string.
func StringValue(s string) Value { return text(String, s) }

// IntValue returns a JSON integer.
func IntValue(i int64) Value { return text(Number, strconv.FormatInt(i, 10)) }

// FloatValue returns a JSON float written as LionAGI's JSON encoder, orjson,
// writes it (FormatFloatOrjson: "1.0", never "1"; "1e16", "1e-7" and
// "0.00001", where Python's repr writes "1e+16", "1e-07" and "1e-05"), so
// that a float historyd holds as a number (created_at, an embedding) is
// exported with LionAGI's bytes. NaN and infinities have no JSON form and
// become null.
func FloatValue(f float64) Value {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value{}
	}
	return text(Number, FormatFloatOrjson(f))
}

// NumberLiteral returns a JSON number holding lit exactly. It reports false
// when lit is not a valid JSON number.
func NumberLiteral(lit string) (Value, bool) {
	if !validNumber(lit) {
		return Value{}, false
	}
	return text(Number, lit), true
}

// ArrayValue returns a JSON array of elems. The slice is kept, not copied.
func ArrayValue(elems ...Value) Value { return collection(Array, elems) }

// text returns a Value of kind k (String or Number) holding s.
func text(k Kind, s string) Value {
	return Value{kind: k, n: length(len(s)), p: unsafe.Pointer(unsafe.StringData(s))}
}

// text returns the text of a String or Number (kind checked by the caller).
func (v Value) text() string { return unsafe.String((*byte)(v.p), v.n) }

// collection returns a Value of kind k (Array or Object) over s: a pointer
// to its first element and its length.
func collection[T Value | Member](k Kind, s []T) Value {
	v := Value{kind: k, n: length(len(s))}
	if len(s) > 0 {
		v.p = unsafe.Pointer(&s[0])
	}
	return v
}

// length checks that a text or collection fits the uint32 length of a
// Value; 2^32 bytes or elements cannot come from a request (a gRPC
// message's length is a uint32), only from a programming error.
func length(n int) uint32 {
	if uint64(n) > math.MaxUint32 {
		panic("jsonv: text or collection of 2^32 or more bytes or elements")
	}
	return uint32(n)
}

// emptyValues and emptyMembers are what Elems and Members return for an
// empty array or object: empty, but not nil.
var (
	emptyValues  = []Value{}
	emptyMembers = []Member{}
)

// arr returns an array's elements (nil for other kinds).
func (v Value) arr() []Value { return items(v, Array, emptyValues) }

// obj returns an object's members (nil for other kinds).
func (v Value) obj() []Member { return items(v, Object, emptyMembers) }

// items returns the elements of a collection that collection built with
// kind k: nil when v is of another kind, empty when v is empty.
func items[T Value | Member](v Value, k Kind, empty []T) []T {
	if v.kind != k {
		return nil
	}
	if v.n == 0 {
		return empty
	}
	return unsafe.Slice((*T)(v.p), v.n)
}

// ObjectValue returns a JSON object of members in the given order. The slice
// is kept, not copied. Keys must be unique (use Set to build objects from
// untrusted keys).
func ObjectValue(members ...Member) Value { return collection(Object, members) }

// Kind returns the value's JSON kind.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is JSON null.
func (v Value) IsNull() bool { return v.kind == Null }

// Bool returns the boolean and whether v is one.
func (v Value) Bool() (bool, bool) { return v.kind == Bool && v.n != 0, v.kind == Bool }

// Str returns the string and whether v is one.
func (v Value) Str() (string, bool) {
	if v.kind != String {
		return "", false
	}
	return v.text(), true
}

// Literal returns a number's JSON text as written (empty for non-numbers).
func (v Value) Literal() string {
	if v.kind != Number {
		return ""
	}
	return v.text()
}

// IsInteger reports whether v is a number written without a fraction or an
// exponent, which Python's json module reads as int.
func (v Value) IsInteger() bool {
	return v.kind == Number && !strings.ContainsAny(v.text(), ".eE")
}

// IsFloat reports whether v is a number that Python reads as float.
func (v Value) IsFloat() bool {
	return v.kind == Number && strings.ContainsAny(v.text(), ".eE")
}

// Float64 returns the number as a float64 (Python's float(x)); integers too
// large for a float64 become ±Inf, as Python's float() would overflow.
func (v Value) Float64() (float64, bool) {
	if v.kind != Number {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.text(), 64)
	if err != nil {
		// ParseFloat returns ±Inf with a range error for huge literals.
		return f, true
	}
	return f, true
}

// Int returns an integer literal as a big.Int (Python ints are unbounded).
func (v Value) Int() (*big.Int, bool) {
	if !v.IsInteger() {
		return nil, false
	}
	n, ok := new(big.Int).SetString(v.text(), 10)
	return n, ok
}

// Int64 returns an integer that fits in an int64.
func (v Value) Int64() (int64, bool) {
	if !v.IsInteger() {
		return 0, false
	}
	n, err := strconv.ParseInt(v.text(), 10, 64)
	return n, err == nil
}

// Len returns the number of elements of an array or members of an object.
func (v Value) Len() int {
	if v.kind == Array || v.kind == Object {
		return int(v.n)
	}
	return 0
}

// Elems returns an array's elements (nil for other kinds). Do not modify.
func (v Value) Elems() []Value { return v.arr() }

// Members returns an object's members in order (nil for other kinds). Do
// not modify.
func (v Value) Members() []Member { return v.obj() }

// Get returns the value of key in an object.
func (v Value) Get(key string) (Value, bool) {
	if v.kind != Object {
		return Value{}, false
	}
	members := v.obj()
	for i := range members {
		if members[i].Key == key {
			return members[i].Value, true
		}
	}
	return Value{}, false
}

// Has reports whether an object has key.
func (v Value) Has(key string) bool {
	_, ok := v.Get(key)
	return ok
}

// Set returns a copy of object v with key set to val: replaced in place when
// present (Python dict assignment keeps the key's position), else appended.
// v itself is not changed. Set on a non-object starts a new object.
func (v Value) Set(key string, val Value) Value {
	old := v.obj()
	members := make([]Member, 0, len(old)+1)
	replaced := false
	for _, m := range old {
		if m.Key == key {
			m.Value = val
			replaced = true
		}
		members = append(members, m)
	}
	if !replaced {
		members = append(members, Member{Key: key, Value: val})
	}
	return ObjectValue(members...)
}

// Delete returns a copy of object v without key. v itself is not changed.
func (v Value) Delete(key string) Value {
	if v.kind != Object {
		return v
	}
	old := v.obj()
	members := make([]Member, 0, len(old))
	for _, m := range old {
		if m.Key != key {
			members = append(members, m)
		}
	}
	return ObjectValue(members...)
}

// Truthy reports Python's bool(x) for the value: null, false, 0, 0.0, "",
// [] and {} are false; everything else is true.
func (v Value) Truthy() bool {
	switch v.kind {
	case Null:
		return false
	case Bool:
		return v.n != 0
	case Number:
		f, _ := v.Float64()
		return f != 0
	case String:
		return v.n != 0
	case Array, Object:
		return v.n > 0
	}
	return false
}

// Equal reports whether a and b are equal as Python compares decoded JSON:
// numbers by value (1 == 1.0), objects regardless of key order, arrays
// element-wise. true is not equal to 1 here, unlike Python, because JSON
// keeps them apart and so must historyd.
func Equal(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case Null:
		return true
	case Bool:
		return a.n == b.n
	case String:
		return a.text() == b.text()
	case Number:
		if a.text() == b.text() {
			return true
		}
		return numbersEqual(a, b)
	case Array:
		ae, be := a.arr(), b.arr()
		if len(ae) != len(be) {
			return false
		}
		for i := range ae {
			if !Equal(ae[i], be[i]) {
				return false
			}
		}
		return true
	case Object:
		if a.n != b.n {
			return false
		}
		for _, m := range a.obj() {
			bv, ok := b.Get(m.Key)
			if !ok || !Equal(m.Value, bv) {
				return false
			}
		}
		return true
	}
	return false
}

func numbersEqual(a, b Value) bool {
	if a.IsInteger() && b.IsInteger() {
		x, ok1 := a.Int()
		y, ok2 := b.Int()
		return ok1 && ok2 && x.Cmp(y) == 0
	}
	// Python compares int and float exactly; big.Float does too.
	x, _, err1 := big.ParseFloat(a.text(), 10, 2048, big.ToNearestEven)
	y, _, err2 := big.ParseFloat(b.text(), 10, 2048, big.ToNearestEven)
	if err1 != nil || err2 != nil {
		return false
	}
	if a.IsFloat() {
		f, _ := a.Float64()
		x = new(big.Float).SetPrec(2048).SetFloat64(f)
	}
	if b.IsFloat() {
		f, _ := b.Float64()
		y = new(big.Float).SetPrec(2048).SetFloat64(f)
	}
	return x.Cmp(y) == 0
}
