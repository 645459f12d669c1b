package main

import (
	"testing"
	"time"
)

// The table's figures: the median of the runs (the mean of the middle two for an even count) with
// their minimum and maximum (issue 8: "median of several runs with min-max").
func TestSummarize(t *testing.T) {
	tests := []struct {
		in   []float64
		want summary
	}{
		{nil, summary{}},
		{[]float64{3}, summary{3, 3, 3}},
		{[]float64{5, 1, 3}, summary{3, 1, 5}},
		{[]float64{4, 1, 3, 2}, summary{2.5, 1, 4}},
	}
	for _, tc := range tests {
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	in := []float64{2, 1}
	summarize(in)
	if in[0] != 2 {
		t.Error("summarize sorted its argument")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 1: 1} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", p, got, want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

// A target is met or missed by the median, never by one lucky run.
func TestRowMet(t *testing.T) {
	r := row{Runs: []float64{0.7, 0.9, 0.75}}
	if r.Met() != "" {
		t.Errorf("a row without a target says %q", r.Met())
	}
	r.Target, r.meets = atLeast(0.8)
	if r.Met() != "NO" {
		t.Errorf("median 0.75 against >= 0.8: %q, want NO", r.Met())
	}
	r.Target, r.meets = atMost(0.8)
	if r.Met() != "yes" {
		t.Errorf("median 0.75 against <= 0.8: %q, want yes", r.Met())
	}
}
