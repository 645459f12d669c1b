package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// commit is set at build time with -ldflags "-X main.commit=..." (make build); without it the
// commit comes from the build information Go stamps into binaries built inside a git checkout.
var commit = ""

// subcommand is one of historyd's subcommands, for the help text (issue 19: "listing the
// subcommands"). Only the ones that exist are listed.
type subcommand struct{ name, synopsis, summary string }

var subcommands = []subcommand{
	{"serve", "historyd [serve] [--FLAG VALUE ...]", "serve gRPC until SIGINT or SIGTERM (the default when no subcommand is given)"},
	{"healthcheck", "historyd healthcheck [--addr HOST:PORT] [--service NAME] [--timeout DURATION] [--tls ...]",
		"call grpc.health.v1.Health/Check on a running historyd; exit 0 only when SERVING (historyd healthcheck --help)"},
	{"migrate", "historyd migrate [--data-dir DIR]\n  historyd migrate --store postgres [--postgres-url URL]",
		"apply the database's pending schema migrations (sqlite in DIR, refused while a historyd serves from it; or PostgreSQL) and exit (historyd migrate --help)"},
	{"backup", "historyd backup --to FILE [--force] [--token-file FILE] [--addr HOST:PORT] [--tls ...]",
		"write a consistent copy of a running historyd's sqlite database to FILE; restore by serving it as historyd.db (historyd backup --help)"},
	{"version", "historyd version", "print the version, the commit and the Go version (also --version)"},
	{"help", "historyd help", "print this help on stdout (also --help, -h)"},
}

// usage returns the help text: the subcommands, then every setting of serve, generated from the
// one settings table, so a flag added there is listed here without more code.
func usage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range subcommands {
		fmt.Fprintf(&b, "  %s\n", c.synopsis)
	}
	b.WriteString("\nSubcommands:\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range subcommands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush() // a strings.Builder does not fail
	b.WriteString("\nFlags of serve. Each has an environment variable; a flag on the command line wins over\n" +
		"the environment, which wins over the default:\n")
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(&b, "  --%s\n        %s\n        (env %s, default %s)\n", s.flag, s.usage, s.env, def)
	}
	b.WriteString("\nExit codes: 0 after a shutdown on SIGINT or SIGTERM (one before serving, while the store\n" +
		"opens, included), 1 when the server cannot start or stops serving on its own, 2 for an invalid\n" +
		"flag or environment value.\n")
	return b.String()
}

// buildInfo is what `historyd version`, the start log line and historyd_build_info report.
type buildInfo struct{ Version, Commit, GoVersion string }

// currentBuild returns the stamped version and commit, falling back to the build information Go
// records (the module version of `go install ...@v1.2.3`, the vcs revision of a build in a git
// checkout).
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return withUnknown(b)
	}
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if b.Commit == "" {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
		b.Commit = rev
	}
	return withUnknown(b)
}

func withUnknown(b buildInfo) buildInfo {
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// printVersion is `historyd version`.
func printVersion(w io.Writer) {
	b := currentBuild()
	fmt.Fprintf(w, "historyd %s\ncommit: %s\ngo: %s\n", b.Version, b.Commit, b.GoVersion)
}

// The flag package's own messages, rewritten into one line that names the flag as the docs write
// it (--name) and says what a valid value looks like.
var (
	reInvalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*)$`)
	reUndefined    = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	reNeedsArg     = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
)

// flagError rewrites an error of fs.Parse or fs.Set.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := reInvalidValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("invalid value %q for --%s: %s", m[1], m[2], validHint(fs, m[2], m[3]))
	}
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s", strings.TrimLeft(m[1], "-"))
	}
	if m := reNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value: %s", m[1], validHint(fs, m[1], ""))
	}
	return msg
}

// validHint says what a valid value of flag name looks like, with an example: the setting's default
// where it is a good one, else one of the flag's type.
func validHint(fs *flag.FlagSet, name, cause string) string {
	f := fs.Lookup(name)
	if f == nil {
		return cause
	}
	example := f.DefValue
	if def, ok := settingDefault(name); ok {
		example = def
	}
	var kind string
	switch v := f.Value.(type) {
	case *byteSize:
		kind = "a size in bytes with an optional KiB, MiB or GiB suffix"
		if example == "0" || example == "" {
			example = "512MiB"
		}
	case flag.Getter:
		switch v.Get().(type) {
		case time.Duration:
			kind = "a Go duration with its unit"
			if example == "0s" || example == "" {
				example = "10s"
			}
		case bool:
			return "want true or false"
		case int, int64, uint, uint64:
			kind = "a whole number"
		}
	}
	if _, err := strconv.ParseUint(example, 10, 64); kind == "" && err == nil {
		kind = "a whole number"
	}
	if r, ok := countRanges[name]; ok { // config_maxima.go
		kind = fmt.Sprintf("a whole number from %d to %d", r[0], r[1])
	}
	switch {
	case kind != "" && example != "":
		return fmt.Sprintf("want %s, such as %s", kind, example)
	case kind != "":
		return "want " + kind
	case example != "":
		return fmt.Sprintf("%s (a valid value: %s)", cause, example)
	}
	return cause
}
