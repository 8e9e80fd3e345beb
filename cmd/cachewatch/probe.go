package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/probe"
)

// probePath is where the multi-target endpoint is served.
const probePath = "/probe"

// probeFlags turn on /probe: the exporter samples the targets Prometheus
// names in its scrapes' URLs instead of its own.
type probeFlags struct {
	modulesFile string
	idleTimeout time.Duration
	maxTargets  int
}

func (f *probeFlags) register(cmd *kingpin.CmdClause) {
	cmd.Flag("probe.modules-file", "YAML file of modules (credentials and sampling settings); serves "+probePath+"?target=redis://host:port&module=NAME and samples only the probed targets (instead of --redis.* and --targets.file).").
		PlaceHolder("FILE").StringVar(&f.modulesFile)
	cmd.Flag("probe.idle-timeout", "Stop sampling a probed target, and close its connections, once it has not been probed for this long.").
		Default(probe.DefaultIdleTimeout.String()).DurationVar(&f.idleTimeout)
	cmd.Flag("probe.max-targets", "Most probed targets sampled at once; a probe of another answers 503.").
		Default(strconv.Itoa(probe.DefaultMaxTargets)).IntVar(&f.maxTargets)
}

// prober returns the /probe handler the flags describe, nil without
// --probe.modules-file. sampling gives each target's options from the
// sampling flags.
func (f *probeFlags) prober(sampling func() (exporter.Options, error), logger *slog.Logger) (*probe.Prober, error) {
	if f.modulesFile == "" {
		return nil, nil
	}
	switch {
	case f.idleTimeout <= 0:
		return nil, fmt.Errorf("--probe.idle-timeout must be positive, got %s", f.idleTimeout)
	case f.maxTargets <= 0:
		return nil, fmt.Errorf("--probe.max-targets must be positive, got %d", f.maxTargets)
	}
	modules, err := probe.LoadModules(f.modulesFile)
	if err != nil {
		return nil, fmt.Errorf("--probe.modules-file: %w", err)
	}
	return probe.New(probe.Options{Modules: modules, Sampling: sampling, IdleTimeout: f.idleTimeout,
		MaxTargets: f.maxTargets, Logger: logger})
}

// probeSampling returns the options every probed target starts from: the
// sampling flags, with classifiers of its own.
func (f *exporterFlags) probeSampling() (func() (exporter.Options, error), error) {
	if f.targetsFile != "" || f.redis.connectionSet() {
		return nil, errors.New("--probe.modules-file with --targets.file or --redis.* connection flags: a probing exporter samples only the targets it is probed for")
	}
	build := func() (exporter.Options, error) {
		opts, err := f.redis.options()
		if err != nil {
			return exporter.Options{}, err
		}
		mode := exporter.NotifyMode(f.notifications) // kingpin checked the value
		opts.Target = exporter.Target{}
		opts.Sample.Interval, opts.Locks.LongHeld, opts.MissBurst = f.interval, f.longHeld, f.missBurst
		opts.Locks.Notifications, opts.Locks.Reconcile = mode, f.reconcile
		return opts, nil
	}
	if _, err := build(); err != nil { // refuse bad sampling flags at start, not at the first probe
		return nil, err
	}
	return build, nil
}

// prober returns the /probe handler, nil without --probe.modules-file.
func (f *exporterFlags) prober(logger *slog.Logger) (*probe.Prober, error) {
	if f.probe.modulesFile == "" {
		return nil, nil
	}
	sampling, err := f.probeSampling()
	if err != nil {
		return nil, err
	}
	return f.probe.prober(sampling, logger)
}
