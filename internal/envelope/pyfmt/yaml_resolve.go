package pyfmt

// PyYAML's Resolver decides, for a plain scalar, which tag a reader would
// give it (YAML 1.1 implicit types). A string that would read back as
// anything but a string cannot be written plain: the emitter quotes it.
// The matchers below restate PyYAML 6.0's implicit-resolver regular
// expressions (resolver.py) without regexp, on the hot path.

// resolvesAsNonString reports whether a plain scalar holding s would be
// read as a bool, int, float, null, timestamp, merge key, value key or
// !!yaml indicator.
func resolvesAsNonString(s string) bool {
	if s == "" {
		return true // null
	}
	switch s[0] {
	case 'y', 'Y', 'n', 'N', 't', 'T', 'f', 'F', 'o', 'O':
		return isYAMLBool(s) || isYAMLNull(s)
	case '~':
		return s == "~"
	case '<':
		return s == "<<"
	case '=':
		return s == "="
	case '!', '&', '*':
		return len(s) == 1
	case '.':
		return isYAMLFloat(s)
	case '-', '+':
		return isYAMLInt(s) || isYAMLFloat(s)
	}
	if isDigit(s[0]) {
		return isYAMLInt(s) || isYAMLFloat(s) || isYAMLTimestamp(s)
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isYAMLBool: yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF.
func isYAMLBool(s string) bool {
	switch s {
	case "yes", "Yes", "YES", "no", "No", "NO",
		"true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF":
		return true
	}
	return false
}

// isYAMLNull: ~|null|Null|NULL| (the empty string is handled by the caller).
func isYAMLNull(s string) bool {
	switch s {
	case "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// span returns how many leading bytes of s satisfy ok.
func span(s string, ok func(byte) bool) int {
	n := 0
	for n < len(s) && ok(s[n]) {
		n++
	}
	return n
}

func isDigitOrUnderscore(c byte) bool { return isDigit(c) || c == '_' }
func isOctalOrUnderscore(c byte) bool { return (c >= '0' && c <= '7') || c == '_' }
func isBinaryOrUnderscore(c byte) bool {
	return c == '0' || c == '1' || c == '_'
}
func isHexOrUnderscore(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '_'
}

func trimSign(s string) string {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		return s[1:]
	}
	return s
}

// sexagesimalTail reports whether s is one or more ":" [0-5]?[0-9] groups
// and returns the rest after them (for the float form, which goes on with
// a "."). It consumes as many groups as it can, which is what the regular
// expression's backtracking settles on, since each group must be followed
// by ":" or by what comes after the groups.
func sexagesimalTail(s string) (rest string, ok bool) {
	groups := 0
	for len(s) > 0 && s[0] == ':' {
		n := span(s[1:], isDigit)
		switch {
		case n == 1:
		case n == 2 && s[1] <= '5':
		default:
			return s, false
		}
		s = s[1+n:]
		groups++
	}
	return s, groups > 0
}

// isYAMLInt restates:
//
//	[-+]?0b[0-1_]+ | [-+]?0[0-7_]+ | [-+]?(?:0|[1-9][0-9_]*)
//	| [-+]?0x[0-9a-fA-F_]+ | [-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+
func isYAMLInt(s string) bool {
	s = trimSign(s)
	if s == "" || !isDigit(s[0]) {
		return false
	}
	if s[0] == '0' {
		if s == "0" {
			return true
		}
		rest := s[1:]
		switch {
		case rest[0] == 'b':
			return len(rest) > 1 && span(rest[1:], isBinaryOrUnderscore) == len(rest)-1
		case rest[0] == 'x':
			return len(rest) > 1 && span(rest[1:], isHexOrUnderscore) == len(rest)-1
		}
		return span(rest, isOctalOrUnderscore) == len(rest)
	}
	n := 1 + span(s[1:], isDigitOrUnderscore)
	if n == len(s) {
		return true
	}
	rest, ok := sexagesimalTail(s[n:])
	return ok && rest == ""
}

// isYAMLFloat restates:
//
//	[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
//	| \.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
//	| [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
//	| [-+]?\.(?:inf|Inf|INF)
//	| \.(?:nan|NaN|NAN)
func isYAMLFloat(s string) bool {
	if s == "" {
		return false
	}
	signed := s[0] == '-' || s[0] == '+'
	body := trimSign(s)
	if body == "" {
		return false
	}
	if body[0] == '.' {
		frac := body[1:]
		switch frac {
		case "inf", "Inf", "INF":
			return true
		case "nan", "NaN", "NAN":
			return !signed
		}
		if signed || frac == "" || !isDigit(frac[0]) {
			return false
		}
		return isExponentTail(frac[span(frac, isDigitOrUnderscore):])
	}
	if !isDigit(body[0]) {
		return false
	}
	rest := body[span(body, isDigitOrUnderscore):]
	if rest != "" && rest[0] == ':' {
		var ok bool
		if rest, ok = sexagesimalTail(rest); !ok || rest == "" || rest[0] != '.' {
			return false
		}
		rest = rest[1:]
		return span(rest, isDigitOrUnderscore) == len(rest)
	}
	if rest == "" || rest[0] != '.' {
		return false
	}
	rest = rest[1:]
	return isExponentTail(rest[span(rest, isDigitOrUnderscore):])
}

// isExponentTail reports whether s is empty or [eE][-+][0-9]+.
func isExponentTail(s string) bool {
	if s == "" {
		return true
	}
	if len(s) < 3 || (s[0] != 'e' && s[0] != 'E') || (s[1] != '-' && s[1] != '+') {
		return false
	}
	return span(s[2:], isDigit) == len(s)-2
}

// isYAMLTimestamp restates:
//
//	[0-9]{4}-[0-9]{2}-[0-9]{2}
//	| [0-9]{4}-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9]{2}:[0-9]{2}
//	  (?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9]{2})?))?
func isYAMLTimestamp(s string) bool {
	if len(s) < 8 || span(s[:4], isDigit) != 4 || s[4] != '-' {
		return false
	}
	if len(s) == 10 && isDigit(s[5]) && isDigit(s[6]) && s[7] == '-' && isDigit(s[8]) && isDigit(s[9]) {
		return true
	}
	rest, ok := digits12(s[5:])
	if !ok || rest == "" || rest[0] != '-' {
		return false
	}
	if rest, ok = digits12(rest[1:]); !ok || rest == "" {
		return false
	}
	switch rest[0] {
	case 'T', 't':
		rest = rest[1:]
	case ' ', '\t':
		rest = rest[span(rest, isSpaceOrTab):]
	default:
		return false
	}
	if rest, ok = digits12(rest); !ok {
		return false
	}
	for range 2 { // :MM:SS
		if len(rest) < 3 || rest[0] != ':' || !isDigit(rest[1]) || !isDigit(rest[2]) {
			return false
		}
		rest = rest[3:]
	}
	if rest != "" && rest[0] == '.' {
		rest = rest[1:]
		rest = rest[span(rest, isDigit):]
	}
	if rest == "" {
		return true
	}
	rest = rest[span(rest, isSpaceOrTab):]
	if rest == "Z" {
		return true
	}
	if rest == "" || (rest[0] != '-' && rest[0] != '+') {
		return false
	}
	if rest, ok = digits12(rest[1:]); !ok {
		return false
	}
	if rest == "" {
		return true
	}
	return len(rest) == 3 && rest[0] == ':' && isDigit(rest[1]) && isDigit(rest[2])
}

func isSpaceOrTab(c byte) bool { return c == ' ' || c == '\t' }

// digits12 consumes [0-9][0-9]? from the front of s.
func digits12(s string) (string, bool) {
	switch n := span(s, isDigit); {
	case n == 0:
		return s, false
	case n == 1:
		return s[1:], true
	default:
		return s[2:], true
	}
}
