package server

import (
	"fmt"
	"sort"

	"github.com/historyd/historyd/internal/envelope"
)

var (
	errTooDeep   = fmt.Errorf("%w: nested too deeply", envelope.ErrInvalid)
	errNonFinite = fmt.Errorf("%w: NaN and infinities have no JSON form", envelope.ErrInvalid)
)

func sortStrings(s []string) { sort.Strings(s) }
