package probe

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/yamlerr"
)

// DefaultModule is the module of a probe without a module parameter.
const DefaultModule = "default"

// ErrUnknownModule is the error of a probe naming a module the modules file
// does not define.
var ErrUnknownModule = errors.New("unknown module")

// Modules are named sets of credentials and sampling settings for probed
// targets, read from a modules file:
//
//	modules:
//	  default:                       # used when the probe names no module
//	    username: sampler
//	    password_file: /run/secrets/redis   # or password_env: REDIS_PASSWORD
//	    mode: auto                   # auto, standalone or cluster
//	    tls: true                    # implied by a rediss:// target
//	    tls_ca_file: /etc/redis/ca.pem
//	    tls_server_name: redis.internal
//	    lock_patterns: ["lock:*"]    # default: --locks.pattern
//	    queues: [orders]             # default: --queue
//	    interval: 30s                # default: --sample.interval
//	    keys_per_second: 5000        # default: --sample.keys-per-second
//
// A password is never written in the file, nor in a probe's URL: a module
// names a file holding it (read again each time a target's sampler starts,
// so a rotated secret is used by the next sampler) or an environment
// variable. The zero Modules holds only an empty default module.
type Modules struct {
	byName map[string]*module
}

// moduleSpec is one module as the file writes it.
type moduleSpec struct {
	Username              string        `yaml:"username"`
	PasswordFile          string        `yaml:"password_file"`
	PasswordEnv           string        `yaml:"password_env"`
	Mode                  string        `yaml:"mode"`
	TLS                   bool          `yaml:"tls"`
	TLSCAFile             string        `yaml:"tls_ca_file"`
	TLSServerName         string        `yaml:"tls_server_name"`
	TLSInsecureSkipVerify bool          `yaml:"tls_insecure_skip_verify"`
	LockPatterns          []string      `yaml:"lock_patterns"`
	Queues                []string      `yaml:"queues"`
	Interval              time.Duration `yaml:"interval"`
	KeysPerSecond         *float64      `yaml:"keys_per_second"`
}

// module is a checked module: its mode parsed and its CAs loaded.
type module struct {
	spec moduleSpec
	mode exporter.Mode
	cas  *x509.CertPool
}

// moduleName is what a module name may be.
var moduleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// LoadModules reads and checks a modules file. Errors name the file and the
// module, never a password.
func LoadModules(path string) (*Modules, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("probe: modules file: %w", err)
	}
	m, err := ParseModules(raw)
	if err != nil {
		return nil, fmt.Errorf("probe: modules file %s: %w", path, err)
	}
	return m, nil
}

// ParseModules checks the YAML of a modules file: unknown fields, a
// password written in it, an unset password_env, an unreadable
// password_file or CA file are refused.
func ParseModules(raw []byte) (*Modules, error) {
	var file struct {
		Modules map[string]moduleSpec `yaml:"modules"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		return nil, errors.New(yamlerr.Redact(err))
	}
	if len(file.Modules) == 0 {
		return nil, errors.New("no modules")
	}
	out := &Modules{byName: map[string]*module{}}
	for name, spec := range file.Modules {
		if !moduleName.MatchString(name) {
			return nil, fmt.Errorf("module %q: a name is 1-63 letters, digits, '_', '.' or '-'", name)
		}
		m, err := spec.check()
		if err != nil {
			return nil, fmt.Errorf("module %q: %w", name, err)
		}
		out.byName[name] = m
	}
	return out, nil
}

// check parses the spec's mode, loads its CAs and makes sure its password
// can be read.
func (s moduleSpec) check() (*module, error) {
	m := &module{spec: s}
	switch s.Mode {
	case "", "auto":
	case "standalone":
		m.mode = exporter.ModeStandalone
	case "cluster":
		m.mode = exporter.ModeCluster
	default:
		return nil, fmt.Errorf("mode %q: want auto, standalone or cluster", s.Mode)
	}
	switch {
	case s.PasswordFile != "" && s.PasswordEnv != "":
		return nil, errors.New("set password_file or password_env, not both")
	case s.Interval < 0:
		return nil, fmt.Errorf("interval must be positive, got %s", s.Interval)
	case slices.Contains(s.LockPatterns, ""):
		return nil, errors.New("empty lock pattern")
	}
	if _, err := s.password(); err != nil {
		return nil, err
	}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca_file: %w", err)
		}
		m.cas = x509.NewCertPool()
		if !m.cas.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_file %s: no PEM certificate in it", s.TLSCAFile)
		}
	}
	return m, nil
}

// password reads the module's password from its file or variable.
func (s moduleSpec) password() (string, error) {
	switch {
	case s.PasswordEnv != "":
		pw := os.Getenv(s.PasswordEnv)
		if pw == "" {
			return "", fmt.Errorf("password_env: $%s is empty or unset", s.PasswordEnv)
		}
		return pw, nil
	case s.PasswordFile != "":
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// lookup returns the module named name ("" is DefaultModule; the zero
// Modules and a file without a default module have an empty one).
func (ms *Modules) lookup(name string) (*module, error) {
	if name == "" {
		name = DefaultModule
	}
	if ms != nil {
		if m, ok := ms.byName[name]; ok {
			return m, nil
		}
	}
	if name == DefaultModule {
		return &module{}, nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownModule, name, strings.Join(ms.Names(), ", "))
}

// Names returns the modules' names, sorted.
func (ms *Modules) Names() []string {
	if ms == nil {
		return nil
	}
	out := make([]string, 0, len(ms.byName))
	for name := range ms.byName {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// options applies the module to base for target t: credentials, TLS and
// the sampling settings it sets.
func (m *module) options(base exporter.Options, t exporter.Target) (exporter.Options, error) {
	s := m.spec
	pw, err := s.password()
	if err != nil {
		return exporter.Options{}, err
	}
	t.Username, t.Password, t.Mode = s.Username, pw, m.mode
	if s.TLS || s.TLSCAFile != "" || s.TLSServerName != "" || s.TLSInsecureSkipVerify {
		if t.TLS == nil {
			host, _, _ := strings.Cut(t.Addrs[0], ":")
			t.TLS = &tls.Config{ServerName: strings.Trim(host, "[]"), MinVersion: tls.VersionTLS12}
		}
		if s.TLSServerName != "" {
			t.TLS.ServerName = s.TLSServerName
		}
		t.TLS.RootCAs, t.TLS.InsecureSkipVerify = m.cas, s.TLSInsecureSkipVerify
	}
	base.Target = t
	if s.LockPatterns != nil {
		base.Locks.Patterns = s.LockPatterns
	}
	if s.Queues != nil {
		base.Queues = s.Queues
	}
	if s.Interval > 0 {
		base.Sample.Interval = s.Interval
	}
	if s.KeysPerSecond != nil {
		base.Sample.KeysPerSecond = *s.KeysPerSecond // as --sample.keys-per-second: 0 the default, negative unpaced
	}
	return base, nil
}
