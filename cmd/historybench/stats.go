package main

import (
	"slices"
	"time"
)

// summary is the median of a row's runs with their minimum and maximum.
type summary struct {
	Median, Min, Max float64
}

// summarize returns the summary of xs (all zero for none). The median of an even count is the mean
// of the two middle values.
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return summary{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// percentile returns the p-th percentile (0 to 100, nearest rank) of durations, which it sorts.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p/100*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
