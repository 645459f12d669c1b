//go:build !race

package postgres

var raceElsewhere map[string]string
