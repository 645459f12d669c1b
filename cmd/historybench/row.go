package main

import "fmt"

// row is one line of the results table.
type row struct {
	Name   string    // what was measured
	Unit   string    // of the values: "ratio", "msg/s", "KB/msg"
	Runs   []float64 // one value per run
	Target string    // e.g. ">= 0.8"; empty when the figure is only reported
	Detail string    // the figures the value was computed from, as medians
	Note   string    // what else the reader must know (every event delivered, ...)
	// meets reports whether a median meets the target; nil when there is none.
	meets func(median float64) bool
	// Profile is the top of a profile taken because the target was missed; nil otherwise.
	Profile *profileTop
	// Skipped, when not empty, says why the row has no figure (no PostgreSQL to compare with):
	// the table prints it instead of the figure, never a made-up one.
	Skipped string
}

// profileTop is the top of a server profile.
type profileTop struct {
	Kind string // "cpu" or "heap"
	File string // where the profile was saved
	Top  string // `go tool pprof -top` output
	Cum  string // the table of `go tool pprof -top -cum`
}

// Summary is the median, minimum and maximum of the runs.
func (r row) Summary() summary { return summarize(r.Runs) }

// Met reports whether the target is met ("yes", "NO"), or "" when there is none.
func (r row) Met() string {
	if r.Skipped != "" {
		return "skipped"
	}
	if r.meets == nil {
		return ""
	}
	if r.meets(r.Summary().Median) {
		return "yes"
	}
	return "NO"
}

// atLeast and atMost build targets.
func atLeast(x float64) (string, func(float64) bool) {
	return fmt.Sprintf(">= %g", x), func(m float64) bool { return m >= x }
}

func atMost(x float64) (string, func(float64) bool) {
	return fmt.Sprintf("<= %g", x), func(m float64) bool { return m <= x }
}
