// Package yamlerr words YAML decoding errors of files that may hold
// secrets: the positions and the names of unknown fields stay, the values
// a decoder quotes do not.
package yamlerr

import (
	"errors"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Redact keeps a YAML error's positions, and the names of unknown
// fields, but not the values it may quote (a password written where it
// should not be).
func Redact(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		if m := yamlLine.FindString(err.Error()); m != "" {
			return m + " not valid YAML"
		}
		return "not valid YAML"
	}
	var parts []string
	for _, e := range te.Errors {
		line := yamlLine.FindString(e)
		if m := yamlUnknown.FindStringSubmatch(e); m != nil {
			hint := ""
			if m[1] == "password" {
				hint = " (use password_file or password_env)"
			}
			parts = append(parts, line+" unknown field "+m[1]+hint)
		} else {
			parts = append(parts, line+" a value of the wrong type")
		}
	}
	return strings.Join(parts, "; ")
}

var (
	yamlLine    = regexp.MustCompile(`line \d+:`)
	yamlUnknown = regexp.MustCompile(`field (\S+) not found`)
)
