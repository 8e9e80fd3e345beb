package instrument

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// cacheNames are the client label values of the open Caches, per registry:
// two Caches under one name would share one breaker gauge (the second
// resetting the first's "open" to "closed") and one in-flight gauge, so
// NewCache refuses a name in use instead of letting the series mix.
var cacheNames = struct {
	mu    sync.Mutex
	inUse map[prometheus.Registerer]map[string]bool
}{inUse: map[prometheus.Registerer]map[string]bool{}}

// claimCacheName reserves name on reg until the returned release is called.
func claimCacheName(reg prometheus.Registerer, name string) (release func(), err error) {
	cacheNames.mu.Lock()
	defer cacheNames.mu.Unlock()
	names := cacheNames.inUse[reg]
	if names[name] {
		return nil, fmt.Errorf("%w: %q is already the name of another open Cache on this registry; "+
			"set CacheOptions.Name (or the Client's Options.Name) so that each has its own "+
			"circuit_breaker_state and loader_in_flight series", ErrNameTaken, name)
	}
	if names == nil {
		names = map[string]bool{}
		cacheNames.inUse[reg] = names
	}
	names[name] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			cacheNames.mu.Lock()
			defer cacheNames.mu.Unlock()
			delete(names, name)
			if len(names) == 0 {
				delete(cacheNames.inUse, reg)
			}
		})
	}, nil
}
