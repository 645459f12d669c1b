//go:build !race

package sqlite

// raceElsewhere is empty without the race detector: every case runs here.
var raceElsewhere map[string]string
