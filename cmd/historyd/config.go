package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"
)

// config is historyd's configuration. Each field has a flag and a HISTORYD_* environment variable;
// a flag on the command line wins over the environment, which wins over the default.
type config struct {
	Listen      string
	LogLevel    string
	LogFormat   string
	GracePeriod time.Duration
	Exchange    exchangeConfig
	History     historyConfig
	Store       storeConfig // --store and the sqlite engine's settings (config_store.go)
	Serving     servingConfig
	PprofAddr   string // --pprof-addr (pprof.go)
	GCPercent   string // --gc-percent (gc.go)
	MemoryLimit string // --memory-limit (memlimit.go)
}

// setting describes one configuration entry, for the flag set, the environment lookup and the
// README's configuration table.
type setting struct {
	flag, env, def, usage string
}

var settings = []setting{
	{"listen", "HISTORYD_LISTEN", "127.0.0.1:50051", "TCP address to serve gRPC on, host:port (port 0 picks a free port)"},
	{"log-level", "HISTORYD_LOG_LEVEL", "info", "minimum log level: debug, info, warn or error"},
	{"log-format", "HISTORYD_LOG_FORMAT", "json", "log encoding on stderr: json or console"},
	{"grace-period", "HISTORYD_GRACE_PERIOD", "10s", "how long shutdown waits for in-flight RPCs before stopping forcibly (Go duration, >= 0)"},
}

// parseConfig reads the configuration from args (without the program name) and getenv. A
// malformed or unknown value is an error wrapping errUsage; -h or --help returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg)

	// The environment first, so that flags parsed afterwards win.
	fromEnv := map[string]string{} // flag -> the variable that set it
	for _, s := range settings {
		if v := getenv(s.env); v != "" {
			if err := fs.Set(s.flag, v); err != nil {
				return config{}, fmt.Errorf("%w: invalid value %q for %s (--%s): %s", errUsage, v, s.env, s.flag, validHint(fs, s.flag, err.Error()))
			}
			fromEnv[s.flag] = s.env
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, err
		}
		return config{}, fmt.Errorf("%w: %s", errUsage, flagError(fs, err))
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	given := givenSettings(args, fromEnv)
	if err := cfg.validate(); err != nil {
		return config{}, withEnvNote(err, given)
	}
	storeGiven := slices.ContainsFunc(given, func(s settingSource) bool { return s.flag == "store" })
	if err := engineMismatch(cfg.Store.Engine, storeGiven, given); err != nil {
		return config{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return cfg, nil
}

// newFlagSet defines every setting's flag on a new flag set, writing into cfg.
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("historyd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and usage itself
	fs.StringVar(&cfg.Listen, "listen", settings[0].def, settings[0].usage)
	fs.StringVar(&cfg.LogLevel, "log-level", settings[1].def, settings[1].usage)
	fs.StringVar(&cfg.LogFormat, "log-format", settings[2].def, settings[2].usage)
	fs.DurationVar(&cfg.GracePeriod, "grace-period", mustDuration(settings[3].def), settings[3].usage)
	cfg.Exchange.register(fs)
	cfg.History.register(fs)
	cfg.Store.register(fs)
	cfg.Serving.register(fs)
	registerPprof(fs, &cfg.PprofAddr)
	registerGC(fs, &cfg.GCPercent)
	registerMemoryLimit(fs, &cfg.MemoryLimit)
	return fs
}

// settingDefault returns the default of the setting whose flag is name, as --help shows it, and
// whether there is such a setting.
func settingDefault(name string) (string, bool) {
	for _, s := range settings {
		if s.flag == name {
			return s.def, true
		}
	}
	return "", false
}

// givenSettings lists the settings given explicitly, on the command line (args, which parse) or
// in the environment (fromEnv: flag -> variable), in the settings' order; the command line wins
// where both give one. A setting at its default value is not given: only these tell an operator's
// choice from the default (engineMismatch). The command line is parsed again on a flag set of
// its own because fs.Visit cannot tell a flag the environment set from one args set.
func givenSettings(args []string, fromEnv map[string]string) []settingSource {
	var scratch config
	cli := newFlagSet(&scratch)
	onCLI := map[string]bool{}
	if cli.Parse(args) == nil {
		cli.Visit(func(f *flag.Flag) { onCLI[f.Name] = true })
	}
	var given []settingSource
	for _, s := range settings {
		switch {
		case onCLI[s.flag]:
			given = append(given, settingSource{flag: s.flag})
		case fromEnv[s.flag] != "":
			given = append(given, settingSource{flag: s.flag, env: fromEnv[s.flag]})
		}
	}
	return given
}

// validate checks the values that the flag types do not. Its errors are usage errors
// (usageError) that list the flags they name.
func (c config) validate() error {
	if err := validateAddr("listen", c.Listen, "127.0.0.1:50051"); err != nil {
		return err
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return badValue("log-level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return badValue("log-format", "%q: want json or console", c.LogFormat)
	}
	if c.GracePeriod < 0 {
		return badValue("grace-period", "%v: must not be negative, such as 10s", c.GracePeriod)
	}
	if err := validatePprof(c.PprofAddr); err != nil {
		return err
	}
	if _, _, err := gcPercent(c.GCPercent, c.Store.Engine, func(string) string { return "" }); err != nil {
		return err
	}
	if _, _, err := memoryLimit(c, func(string) string { return "" }); err != nil {
		return err
	}
	if err := c.Serving.validate(); err != nil {
		return err
	}
	if err := c.History.validate(); err != nil {
		return err
	}
	if err := c.Store.validate(); err != nil {
		return err
	}
	return c.Exchange.validate()
}

// validateAddr checks a host:port flag value at parse time, so that a port out of range is a usage
// error (exit 2) rather than a failure to listen (issue 19).
func validateAddr(flagName, addr, example string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return usagef([]string{flagName}, "invalid value %q for --%s: %v; want host:port, such as %s", addr, flagName, err, example)
	}
	return nil
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic("historyd: bad built-in duration " + s) // a programming error in settings, never input
	}
	return d
}
