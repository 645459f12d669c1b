package envelope

// Role is LionAGI's closed MessageRole vocabulary (ADR-0006 D1). Its string
// value is what LionAGI's JSON writes.
type Role string

// The five roles of ADR-0006 D1.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleUnset     Role = "unset"
	RoleAction    Role = "action"
)

// roleFromString returns the role a string names, case-sensitively (ADR-0006
// D1: "a known role string becomes MessageRole"; "USER" stays a plain
// string, as the vectors show).
func roleFromString(s string) (Role, bool) {
	switch Role(s) {
	case RoleSystem, RoleUser, RoleAssistant, RoleUnset, RoleAction:
		return Role(s), true
	}
	return "", false
}
