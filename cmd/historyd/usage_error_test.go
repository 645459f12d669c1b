package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestWithEnvNote: the note names the variables that gave the flags the usage error lists, in the
// settings' order, and none given on the command line or not listed.
func TestWithEnvNote(t *testing.T) {
	err := usagef([]string{"max-rendered-bytes", "max-response-bytes"}, "--max-rendered-bytes 2 is above --max-response-bytes 1")
	given := []settingSource{
		{flag: "max-response-bytes", env: "HISTORYD_MAX_RESPONSE_BYTES"},
		{flag: "max-rendered-bytes", env: "HISTORYD_MAX_RENDERED_BYTES"},
		{flag: "max-import-bytes", env: "HISTORYD_MAX_IMPORT_BYTES"},
	}
	want := "invalid usage: --max-rendered-bytes 2 is above --max-response-bytes 1 (set by HISTORYD_MAX_RESPONSE_BYTES, HISTORYD_MAX_RENDERED_BYTES)"
	if got := withEnvNote(err, given); got.Error() != want || !errors.Is(got, errUsage) {
		t.Errorf("withEnvNote = %q, want %q (a usage error)", got, want)
	}
	given[0].env = "" // --max-response-bytes on the command line
	want = "invalid usage: --max-rendered-bytes 2 is above --max-response-bytes 1 (set by HISTORYD_MAX_RENDERED_BYTES)"
	if got := withEnvNote(err, given); got.Error() != want {
		t.Errorf("withEnvNote = %q, want %q", got, want)
	}
	if got := withEnvNote(err, given[:1]); got.Error() != err.Error() {
		t.Errorf("withEnvNote, nothing from the environment = %q, want %q", got, err)
	}
	plain := withEnvNote(fmt.Errorf("--max-import-bytes refused"), given)
	if want := "invalid usage: --max-import-bytes refused"; plain.Error() != want || !errors.Is(plain, errUsage) {
		t.Errorf("withEnvNote of an error that lists no flags = %q, want %q (a usage error)", plain, want)
	}
}

// TestUsageErrorsListTheirFlags: for every setting, given alone with values that the range and
// choice checks refuse, by flag or by its variable, the usage error lists exactly the flags its
// line names (so that withEnvNote adds the right variables), and a value from the environment is
// followed by the variable that gave it: a check whose error lists no flag would lose the note.
func TestUsageErrorsListTheirFlags(t *testing.T) {
	values := []string{"0", "-1", "0s", "-1s", "bogus", "9090", "1025", "70000", "4294967295", "600MiB", "1KiB", "postgres", "c.pem"}
	refused := 0
	for _, s := range settings {
		for _, v := range values {
			for _, byEnv := range []bool{false, true} {
				args, env := []string{"--" + s.flag, v}, map[string]string{}
				if byEnv {
					args, env = nil, map[string]string{s.env: v}
				}
				_, err := parseConfig(args, envOf(env))
				var ue *usageError
				if !errors.As(err, &ue) {
					continue // accepted, or refused by the flag's parser (which names the variable itself)
				}
				refused++
				var named []string
				for _, other := range settings {
					if namesFlag(ue.line, other.flag) {
						named = append(named, other.flag)
					}
				}
				slices.Sort(named)
				if got := slices.Sorted(slices.Values(ue.flags)); !slices.Equal(got, named) {
					t.Errorf("%s=%q: usage error %q lists the flags %q, its line names %q", s.flag, v, ue.line, got, named)
				}
				if byEnv && slices.Contains(ue.flags, s.flag) && !strings.HasSuffix(ue.line, "(set by "+s.env+")") {
					t.Errorf("%s=%q: usage error %q does not end with (set by %s)", s.env, v, ue.line, s.env)
				}
			}
		}
	}
	if refused < 100 {
		t.Errorf("only %d values refused by the range and choice checks: the test no longer reaches them", refused)
	}
}

// namesFlag reports whether line names --flag itself, not a longer flag it begins.
func namesFlag(line, flag string) bool {
	for rest := line; ; {
		i := strings.Index(rest, "--"+flag)
		if i < 0 {
			return false
		}
		rest = rest[i+2+len(flag):]
		if rest == "" || !(rest[0] == '-' || rest[0] >= 'a' && rest[0] <= 'z') {
			return true
		}
	}
}
