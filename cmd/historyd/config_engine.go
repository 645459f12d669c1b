package main

import (
	"fmt"
	"slices"
	"strings"
)

// engineSettings names the settings only some engines read, and those engines. Every other
// setting applies whatever --store is. An explicitly given setting that --store's engine does
// not read is a usage error (engineMismatch): `historyd --postgres-url URL` without --store
// postgres served (and `historyd migrate` migrated) ./data and exited 0, with nothing to say the
// URL had been ignored.
var engineSettings = map[string][]string{
	"data-dir":                   {storeSQLite},
	"sync":                       {storeSQLite},
	"sqlite-cache":               {storeSQLite},
	"sqlite-readers":             {storeSQLite},
	"max-db-bytes":               {storeSQLite},
	"auto-migrate":               {storeSQLite, storePostgres},
	"postgres-url":               {storePostgres},
	"postgres-max-conns":         {storePostgres},
	"postgres-statement-timeout": {storePostgres},
	"memory-budget":              {storeMemory},
	"exchange-max-bytes":         {storeMemory},
}

// settingSource says where an explicitly given setting came from, for engineMismatch.
type settingSource struct {
	flag string // the setting's flag name, without dashes
	env  string // its environment variable when it came from there; "" when from the command line
}

// name is how the error names the setting: as the operator gave it.
func (s settingSource) name() string {
	if s.env != "" {
		return s.env
	}
	return "--" + s.flag
}

// engineMismatch returns the usage error for the first setting in given that engine does not
// read, or nil. storeGiven says whether --store (or HISTORYD_STORE) was given, for the hint.
//
// The sqlite engine's settings in the environment are the exception: sqlite is the default, and
// images and units set its variables for it (deploy/Dockerfile sets HISTORYD_DATA_DIR, the systemd
// unit too), so a deployment that picks --store postgres or memory on top of them has done
// nothing wrong, and they are ignored. On the command line they are refused like the others.
func engineMismatch(engine string, storeGiven bool, given []settingSource) error {
	for _, s := range given {
		engines, ok := engineSettings[s.flag]
		if !ok || slices.Contains(engines, engine) {
			continue
		}
		if s.env != "" && slices.Contains(engines, storeSQLite) {
			continue
		}
		stores := make([]string, len(engines))
		for i, e := range engines {
			stores[i] = "--store " + e
		}
		hint := "add " + strings.Join(stores, " or ")
		if storeGiven {
			hint = fmt.Sprintf("drop %s, or use %s", s.name(), strings.Join(stores, " or "))
		}
		return fmt.Errorf("%s is set but --store is %s; %s", s.name(), engine, hint)
	}
	return nil
}
