package main

import "testing"

// TestGCPercent: --gc-percent is auto by default (GOGC from the environment when set, else
// DefaultGCPercent with the memory engine and DatabaseGCPercent with the others), off, or a
// positive percent; anything else is a usage error.
func TestGCPercent(t *testing.T) {
	env := func(gogc string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return gogc
			}
			return ""
		}
	}
	for _, tc := range []struct {
		value, store, gogc string
		percent            int
		set, bad           bool
	}{
		{value: "auto", store: storeMemory, percent: DefaultGCPercent, set: true},
		{value: "auto", store: storeSQLite, percent: DatabaseGCPercent, set: true},
		{value: "auto", store: storePostgres, percent: DatabaseGCPercent, set: true},
		{value: "auto", store: storeSQLite, gogc: "200"},
		{value: "off", store: storeMemory, percent: -1, set: true},
		{value: "80", store: storeSQLite, gogc: "200", percent: 80, set: true},
		{value: "0", bad: true},
		{value: "-5", bad: true},
		{value: "lots", bad: true},
	} {
		n, set, err := gcPercent(tc.value, tc.store, env(tc.gogc))
		if (err != nil) != tc.bad || n != tc.percent || set != tc.set {
			t.Errorf("gcPercent(%q, %s, GOGC=%q) = %d, %v, %v; want %d, %v, error %v", tc.value, tc.store, tc.gogc, n, set, err, tc.percent, tc.set, tc.bad)
		}
	}
	if _, err := parseConfig([]string{"--gc-percent", "lots"}, env("")); err == nil {
		t.Error("--gc-percent lots parsed")
	}
}
