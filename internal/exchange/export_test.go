package exchange

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// What only the tests use: LionAGI's Exchange and Flow calls that historyd serves no other way, so
// that the vectors replay against the production flow type.

// Has reports whether owner is registered (LionAGI's `owner in exchange`).
func (x *Exchange) Has(owner uuid.UUID) bool { return x.isRegistered(owner) }

// Len returns the number of registered owners (LionAGI's len(exchange)).
func (x *Exchange) Len() int { return x.reg.len() }

// OwnerIDs returns the registered owners in registration order (LionAGI's owner_ids).
func (x *Exchange) OwnerIDs() []uuid.UUID {
	var ids []uuid.UUID
	for _, f := range x.reg.view().flows(0) {
		ids = append(ids, f.owner)
	}
	return ids
}

// The Flow errors of vector "Flow basics".
var (
	// ErrProgressionExists is Flow.add_progression's ExistsError.
	ErrProgressionExists = errors.New("progression already exists")
	// ErrProgressionNotFound is Flow.get_progression's NotFoundError.
	ErrProgressionNotFound = errors.New("progression not found in flow")
)

// flowError carries LionAGI's exact text for a Flow error and unwraps to its sentinel.
type flowError struct {
	sentinel error
	text     string
}

func (e *flowError) Error() string { return e.text }

func (e *flowError) Unwrap() error { return e.sentinel }

// newFlow is LionAGI's Flow(name=...): no progression yet.
func newFlow() *flow { return &flow{byName: map[string]*progression{}} }

// addProgressionChecked is Flow.add_progression: a name in use is ErrProgressionExists.
func (f *flow) addProgressionChecked(name string) error {
	if _, ok := f.byName[name]; ok {
		return &flowError{ErrProgressionExists, fmt.Sprintf("Progression with name '%s' already exists.", name)}
	}
	f.addProgression(name)
	return nil
}

// progression is Flow.get_progression.
func (f *flow) progression(name string) (*progression, error) {
	p, ok := f.byName[name]
	if !ok {
		return nil, &flowError{ErrProgressionNotFound, fmt.Sprintf("Progression '%s' not found in flow", name)}
	}
	return p, nil
}

// addItem is Flow.add_item(m, progressions=prog): a missing progression adds nothing.
func (f *flow) addItem(m *envelope.Message, prog string) error {
	p, err := f.progression(prog)
	if err != nil {
		return err
	}
	f.push(p, entry{msg: m})
	return nil
}

// len is len(flow): the messages it holds.
func (f *flow) len() int { return f.items }

// ProgressionView is one named progression of a flow: its message ids in order.
type ProgressionView struct {
	Name string
	IDs  []uuid.UUID
}

// views returns every live progression, in the flow's order, and the held message ids in insertion
// order (LionAGI's items pile). The caller holds f.mu or owns f.
func (f *flow) views() ([]ProgressionView, []uuid.UUID) {
	var out []ProgressionView
	var all []entry
	for _, p := range f.progs {
		if p.removed {
			continue
		}
		ids := make([]uuid.UUID, 0, p.len())
		for _, e := range p.live() {
			ids = append(ids, e.msg.ID)
		}
		out = append(out, ProgressionView{Name: p.name, IDs: ids})
		all = append(all, p.live()...)
	}
	slices.SortFunc(all, func(a, b entry) int { return cmpUint(a.seq, b.seq) })
	items := make([]uuid.UUID, len(all))
	for i, e := range all {
		items[i] = e.msg.ID
	}
	return out, items
}

// liveInboxes returns the number of owner's inboxes, empty ones included; -1 when owner is not
// registered.
func (x *Exchange) liveInboxes(owner uuid.UUID) int {
	f := x.lookup(owner)
	if f == nil {
		return -1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.progs {
		if p.inbox && !p.removed {
			n++
		}
	}
	return n
}
