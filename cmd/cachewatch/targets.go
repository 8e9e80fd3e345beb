package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/yamlerr"
)

// targetsFile is the --targets.file format: several Redis targets watched
// by one exporter, each sampled apart (its own sampler and budget) and
// labelled target on every series.
//
//	targets:
//	  - name: orders                 # the target label; required, unique
//	    url: rediss://sampler@orders-redis:6380/0   # or addrs: [host:port, …]
//	    password_file: /run/secrets/orders-redis    # or password_env: ORDERS_REDIS_PASSWORD
//	    mode: auto                   # auto, standalone or cluster
//	    tls_ca_file: /etc/redis/ca.pem
//	    queues: [orders]             # default: --queue
//	    lock_patterns: ["lock:*"]    # default: --locks.pattern
//	    keys_per_second: 5000        # default: --sample.keys-per-second
//
// A password is never written in the file itself: password_file names a
// file holding it, password_env an environment variable. The other sampling
// flags apply to every target.
type targetsFile struct {
	Targets []targetEntry `yaml:"targets"`
}

type targetEntry struct {
	Name                  string   `yaml:"name"`
	URL                   string   `yaml:"url"`
	Addrs                 []string `yaml:"addrs"`
	User                  string   `yaml:"user"`
	PasswordFile          string   `yaml:"password_file"`
	PasswordEnv           string   `yaml:"password_env"`
	Mode                  string   `yaml:"mode"`
	TLS                   bool     `yaml:"tls"`
	TLSCAFile             string   `yaml:"tls_ca_file"`
	TLSServerName         string   `yaml:"tls_server_name"`
	TLSInsecureSkipVerify bool     `yaml:"tls_insecure_skip_verify"`
	Queues                []string `yaml:"queues"`
	LockPatterns          []string `yaml:"lock_patterns"`
	KeysPerSecond         *float64 `yaml:"keys_per_second"`
}

// targetName is what a target label value may be.
var targetName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$`)

// readTargets reads the targets file into one set of options per target,
// base giving the sampling flags. Errors name the file and the target,
// never a password.
func readTargets(path string, base redisFlags) ([]exporter.Options, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--targets.file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var tf targetsFile
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("--targets.file %s: %s", path, yamlerr.Redact(err))
	}
	if len(tf.Targets) == 0 {
		return nil, fmt.Errorf("--targets.file %s: no targets", path)
	}
	seen := map[string]bool{}
	out := make([]exporter.Options, 0, len(tf.Targets))
	for i, t := range tf.Targets {
		opts, err := t.options(base, seen)
		if err != nil {
			return nil, fmt.Errorf("--targets.file %s: target %d (%q): %w", path, i+1, t.Name, err)
		}
		out = append(out, opts)
	}
	return out, nil
}

// options builds one target's options on a copy of the flags.
func (t targetEntry) options(base redisFlags, seen map[string]bool) (exporter.Options, error) {
	switch {
	case !targetName.MatchString(t.Name):
		return exporter.Options{}, errors.New("name must be 1-63 letters, digits, '_', '.', ':' or '-'")
	case seen[t.Name]:
		return exporter.Options{}, errors.New("name used twice")
	case (t.URL == "") == (len(t.Addrs) == 0):
		return exporter.Options{}, errors.New("set one of url and addrs")
	case t.PasswordFile != "" && t.PasswordEnv != "":
		return exporter.Options{}, errors.New("set password_file or password_env, not both")
	}
	seen[t.Name] = true
	f := base
	f.url, f.urlAlias, f.addrs, f.user = t.URL, "", t.Addrs, t.User
	f.passwordFile, f.passwordEnv, f.noPasswordEnv = t.PasswordFile, t.PasswordEnv, t.PasswordEnv == ""
	if t.PasswordEnv != "" && os.Getenv(t.PasswordEnv) == "" {
		return exporter.Options{}, fmt.Errorf("password_env: $%s is empty or unset", t.PasswordEnv)
	}
	f.mode = "auto"
	if t.Mode != "" {
		f.mode = t.Mode
	}
	if f.mode != "auto" && f.mode != "standalone" && f.mode != "cluster" {
		return exporter.Options{}, fmt.Errorf("mode %q: want auto, standalone or cluster", t.Mode)
	}
	f.tls, f.tlsCA, f.tlsServerName, f.tlsSkipVerify = t.TLS, t.TLSCAFile, t.TLSServerName, t.TLSInsecureSkipVerify
	if t.Queues != nil {
		f.queues = t.Queues
	}
	if t.LockPatterns != nil {
		f.lockPatterns = t.LockPatterns
	}
	if t.KeysPerSecond != nil {
		f.keysPerSecond = *t.KeysPerSecond
	}
	opts, err := f.options()
	opts.Name = t.Name
	return opts, err
}

// connectionSet reports whether any --redis.* connection flag was given.
func (f *redisFlags) connectionSet() bool {
	return f.url != "" || f.urlAlias != "" || len(f.addrs) > 0 || f.user != "" || f.passwordFile != "" ||
		f.tls || f.tlsCA != "" || f.tlsServerName != "" || f.tlsSkipVerify || f.mode != "auto"
}
