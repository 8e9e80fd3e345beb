// Package keygrouptest gives tests a key-group classifier that keeps every
// name at once (keygroup.Options.MinKeys 1), for tests that use fewer keys
// per group than learning needs and read each group back by its name.
package keygrouptest

import (
	"testing"

	"github.com/cachewatch/cachewatch/keygroup"
)

// Named returns a classifier of rules that keeps every name at once.
func Named(t testing.TB, rules ...keygroup.Rule) *keygroup.Classifier {
	t.Helper()
	c, err := keygroup.New(keygroup.Options{MinKeys: 1, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
