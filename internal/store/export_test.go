package store

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
)

// LionAGI's Progression list operations, which the conformance replay
// (conformance_steps_test.go) drives against the recorded results. historyd
// itself only stores, checks and encodes progressions, so they live here,
// in the package's tests, not in its API.

// noItems is LionAGI's text for popleft on an empty progression.
const noItems = "No items in progression."

// ErrNotInProgression is returned by the Progression operations that need
// an item the progression does not hold (LionAGI's NotFoundError).
var ErrNotInProgression = errors.New("item not found in progression")

// Len returns the number of items.
func (p *Progression) Len() int { return len(p.Order) }

// Contains reports whether every id is in the progression (Python's
// `ids in progression`); no ids is false.
func (p *Progression) Contains(ids ...uuid.UUID) bool {
	if len(ids) == 0 {
		return false
	}
	for _, id := range ids {
		if !slices.Contains(p.Order, id) {
			return false
		}
	}
	return true
}

// Include appends the ids that are not present yet, in order, and reports
// whether it appended any.
func (p *Progression) Include(ids ...uuid.UUID) bool {
	added := false
	for _, id := range ids {
		if !slices.Contains(p.Order, id) {
			p.Order = append(p.Order, id)
			added = true
		}
	}
	return added
}

// Append appends the ids, present or not.
func (p *Progression) Append(ids ...uuid.UUID) { p.Order = append(p.Order, ids...) }

// Exclude removes every occurrence of the ids and reports whether it
// removed any.
func (p *Progression) Exclude(ids ...uuid.UUID) bool {
	n := len(p.Order)
	p.Order = slices.DeleteFunc(p.Order, func(x uuid.UUID) bool { return slices.Contains(ids, x) })
	return len(p.Order) != n
}

// Insert inserts the ids at index i (Python list.insert clamps i to the
// list's bounds, negative counting from the end).
func (p *Progression) Insert(i int, ids ...uuid.UUID) {
	i = clampInsert(i, len(p.Order))
	p.Order = slices.Insert(p.Order, i, ids...)
}

// Index returns the position of the first occurrence of id.
func (p *Progression) Index(id uuid.UUID) (int, error) {
	if i := slices.Index(p.Order, id); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("%w: %s", ErrNotInProgression, id)
}

// Get returns the id at index i (negative counts from the end).
func (p *Progression) Get(i int) (uuid.UUID, error) {
	j, ok := normIndex(i, len(p.Order))
	if !ok {
		return uuid.UUID{}, fmt.Errorf("%w: index %d", ErrNotInProgression, i)
	}
	return p.Order[j], nil
}

// Pop removes and returns the id at index i (negative counts from the end;
// Python's pop() is Pop(-1)).
func (p *Progression) Pop(i int) (uuid.UUID, error) {
	j, ok := normIndex(i, len(p.Order))
	if !ok {
		return uuid.UUID{}, fmt.Errorf("%w: pop index %d of %d", ErrNotInProgression, i, len(p.Order))
	}
	id := p.Order[j]
	p.Order = slices.Delete(p.Order, j, j+1)
	return id, nil
}

// PopLeft removes and returns the first id.
func (p *Progression) PopLeft() (uuid.UUID, error) {
	if len(p.Order) == 0 {
		return uuid.UUID{}, fmt.Errorf("%w: %s", ErrNotInProgression, noItems)
	}
	return p.Pop(0)
}

// Remove removes the first occurrence of each id; an id that is absent is
// an error and nothing is removed.
func (p *Progression) Remove(ids ...uuid.UUID) error {
	for _, id := range ids {
		if !slices.Contains(p.Order, id) {
			return fmt.Errorf("%w: %s", ErrNotInProgression, id)
		}
	}
	for _, id := range ids {
		i := slices.Index(p.Order, id)
		p.Order = slices.Delete(p.Order, i, i+1)
	}
	return nil
}

// clampInsert is Python's list.insert index rule.
func clampInsert(i, n int) int {
	if i < 0 {
		i += n
		if i < 0 {
			i = 0
		}
	}
	if i > n {
		i = n
	}
	return i
}

// normIndex turns a Python index into a slice index.
func normIndex(i, n int) (int, bool) {
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}
