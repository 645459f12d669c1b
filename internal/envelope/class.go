package envelope

import "strings"

// Kind is the concrete LionAGI message class of a Message: the base Message
// (generic content, used by the Exchange) or one of the five typed
// conversational classes of ADR-0006 D2.
type Kind uint8

// The message kinds. The zero value is the generic base Message.
const (
	KindGeneric Kind = iota
	KindSystem
	KindInstruction
	KindAssistantResponse
	KindActionRequest
	KindActionResponse
)

// classInfo describes one class of the closed registry.
type classInfo struct {
	short string // LionAGI's class name
	full  string // the fully qualified name LionAGI writes (ADR-0001 D2)
	role  Role   // the class-fixed role (ADR-0006 D1)
}

var kinds = [...]classInfo{
	KindGeneric:           {"Message", "lionagi.protocols.messages.message.Message", RoleUnset},
	KindSystem:            {"System", "lionagi.protocols.messages.system.System", RoleSystem},
	KindInstruction:       {"Instruction", "lionagi.protocols.messages.instruction.Instruction", RoleUser},
	KindAssistantResponse: {"AssistantResponse", "lionagi.protocols.messages.assistant_response.AssistantResponse", RoleAssistant},
	KindActionRequest:     {"ActionRequest", "lionagi.protocols.messages.action_request.ActionRequest", RoleAction},
	KindActionResponse:    {"ActionResponse", "lionagi.protocols.messages.action_response.ActionResponse", RoleAction},
}

// Class names of the non-message Elements LionAGI writes; historyd reads
// them only to recognise (and refuse to load) them.
const (
	classElement = "lionagi.protocols.generic.element.Element"
	classNode    = "lionagi.protocols.graph.node.Node"
	// ClassBranch is the lion_class ExportBranch writes for a branch.
	ClassBranch = "lionagi.session.branch.Branch"
	// ClassPile is the lion_class of a serialized Pile.
	ClassPile = "lionagi.protocols.generic.pile.Pile"
	// ClassProgression is the lion_class of a serialized Progression.
	ClassProgression = "lionagi.protocols.generic.progression.Progression"
	// ClassFlow is the lion_class of an Exchange owner's Flow.
	ClassFlow = "lionagi.protocols.generic.flow.Flow"
	// ClassExchange is the lion_class of LionAGI's Exchange.
	ClassExchange = "lionagi.session.exchange.Exchange"
	// ClassElement and ClassNode are the non-message Element classes.
	ClassElement = classElement
	ClassNode    = classNode
)

// String returns the class's short name ("Instruction").
func (k Kind) String() string {
	if int(k) < len(kinds) {
		return kinds[k].short
	}
	return "Kind(?)"
}

// ClassName returns the fully qualified lion_class LionAGI writes for k.
func (k Kind) ClassName() string { return kinds[k].full }

// Role returns the class-fixed role of k (ADR-0006 D1).
func (k Kind) Role() Role { return kinds[k].role }

// classIndex maps every accepted spelling of a message class to its kind:
// the full name, the package-path alias (lionagi.protocols.messages.X) and
// the legacy short name (docs/design.md#envelope). The list is closed: nothing else is accepted, nothing is loaded.
var classIndex = func() map[string]Kind {
	m := make(map[string]Kind, 3*len(kinds))
	for k, c := range kinds {
		m[c.full] = Kind(k)
		m["lionagi.protocols.messages."+c.short] = Kind(k)
		m[c.short] = Kind(k)
	}
	return m
}()

// LookupClass returns the message kind a lion_class names. It reports
// false for any other name, including Element and Node, which are not
// messages.
func LookupClass(name string) (Kind, bool) {
	k, ok := classIndex[name]
	return k, ok
}

// isElementClass reports whether name is a non-message Element class
// LionAGI writes (Element, Node, in their accepted spellings).
func isElementClass(name string) bool {
	switch name {
	case classElement, classNode, "Element", "Node",
		"lionagi.protocols.generic.Element", "lionagi.protocols.graph.Node":
		return true
	}
	return false
}

// shortClassName returns the last dotted part of a class name, for errors.
func shortClassName(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}
