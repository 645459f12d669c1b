package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// errUsage marks a configuration error that should exit 2 with a usage line.
var errUsage = errors.New("invalid usage")

// usageError is a value refused by a range or choice check: one line that leads with the flag and
// the value, and the flags it names. It is errUsage (errors.Is). The flags are what withEnvNote
// reads to say which variable gave a value, so that the line's words need not be searched.
type usageError struct {
	line  string   // what is wrong, such as `--log-level "loud": want debug, info, warn or error`
	flags []string // the flags line names, without dashes, in any order
}

func (e *usageError) Error() string { return errUsage.Error() + ": " + e.line }

// Unwrap returns errUsage, so that errors.Is(err, errUsage) holds.
func (e *usageError) Unwrap() error { return errUsage }

// usagef returns the usage error whose line is format's text, which names flags.
func usagef(flags []string, format string, args ...any) error {
	return &usageError{line: fmt.Sprintf(format, args...), flags: flags}
}

// badValue returns the usage error about one flag's value: "--flag " followed by format's text,
// which starts with the value.
func badValue(flag, format string, args ...any) error {
	return usagef([]string{flag}, "--"+flag+" "+format, args...)
}

// withEnvNote adds to the usage error err the environment variables that gave the flags it names
// (given says where each setting given came from, in the settings' order): an operator who set no
// flag sees where the value came from, as in "(set by HISTORYD_MAX_CONNECTIONS)". An error that is
// not a *usageError names no flag it knows of, and becomes a usage error as it is.
func withEnvNote(err error, given []settingSource) error {
	var ue *usageError
	if !errors.As(err, &ue) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var vars []string
	for _, g := range given {
		if g.env != "" && slices.Contains(ue.flags, g.flag) {
			vars = append(vars, g.env)
		}
	}
	if len(vars) == 0 {
		return ue
	}
	return &usageError{line: ue.line + " (set by " + strings.Join(vars, ", ") + ")", flags: ue.flags}
}
