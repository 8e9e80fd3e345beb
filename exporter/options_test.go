package exporter

import (
	"reflect"
	"testing"

	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
)

// DefaultOptions holds the defaults New applies: an Exporter built from
// them samples as one built from zero values, and none of them is zero
// (a field left out of DefaultOptions would show as a zero flag default).
func TestDefaultOptionsAreNewsDefaults(t *testing.T) {
	target := Target{Addrs: []string{"127.0.0.1:6379"}}
	zero, err := Options{Target: target}.config()
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultOptions()
	d.Target = target
	filled, err := d.config()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*sampler.Config{&zero, &filled} {
		c.KeyGroups, c.LockGroups, c.Logger, c.Clock = nil, nil, nil, nil // built anew by each call
	}
	if !reflect.DeepEqual(zero, filled) {
		t.Fatalf("config from DefaultOptions differs from the zero value's:\n%+v\n%+v", filled, zero)
	}
	d = DefaultOptions()
	for _, group := range []reflect.Value{reflect.ValueOf(d.Sample), reflect.ValueOf(d.Locks)} {
		for i := range group.NumField() {
			f := group.Type().Field(i)
			if f.Name != "Groups" && group.Field(i).IsZero() {
				t.Errorf("DefaultOptions().%s.%s is zero", group.Type().Name(), f.Name)
			}
		}
	}
	for name, v := range map[string]int{"MaxQueueReply": d.MaxQueueReply, "MaxInfoReply": d.MaxInfoReply} {
		if v == 0 {
			t.Errorf("DefaultOptions().%s is zero", name)
		}
	}
}

// A notification mode that is none of the four is refused by New.
func TestUnknownNotifyModeRefused(t *testing.T) {
	if _, err := New(Options{Target: Target{Addrs: []string{"127.0.0.1:6379"}}, Locks: LockOptions{Notifications: "sometimes"}}); err == nil {
		t.Fatal("New accepted notification mode \"sometimes\"")
	}
}
