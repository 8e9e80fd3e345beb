package emit

import "errors"

// ErrNameTaken is the error of a name another open Cache or hook already
// uses on the same registry: their series would merge, or collide at every
// scrape. instrument.ErrNameTaken and hooks.ErrNameTaken are this value, so
// errors.Is matches either.
var ErrNameTaken = errors.New("cachewatch: name already taken on this registry")
