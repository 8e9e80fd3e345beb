package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/exporter/locks"
)

func init() {
	register(command{name: "locks", help: "List the locks a live Redis holds and who holds them, refreshed like top.", define: defineLocks})
}

type locksFlags struct {
	redis  redisFlags
	format string
	watch  locks.WatchOptions
	rate   float64
}

func defineLocks(cmd *kingpin.CmdClause) action {
	f := &locksFlags{}
	// Keys are listed for the operator, never stored as labels: group
	// names are kept from the first key.
	f.redis.minKeysDefault = 1
	f.redis.register(cmd)
	cmd.Flag("format", "Output format: table or json.").Default("table").EnumVar(&f.format, "table", "json")
	cmd.Flag("once", "Print one listing and exit (also when stdout is not a terminal).").BoolVar(&f.watch.Once)
	cmd.Flag("refresh", "Time between listings.").Default(locks.DefaultRefresh.String()).DurationVar(&f.watch.Refresh)
	cmd.Flag("limit", "Rows of the table, longest-held first (0: all).").Default("50").IntVar(&f.watch.Limit)
	cmd.Flag("scan-rate", "Keys SCAN may visit per second per node.").
		Default(strconv.Itoa(locks.DefaultRate)).Float64Var(&f.rate)
	return f.run
}

func (f *locksFlags) run(ctx context.Context, c *cli) int {
	f.redis.setLogger(c.logger)
	opts, err := f.redis.options()
	switch {
	case err != nil:
	case f.watch.Refresh <= 0:
		err = fmt.Errorf("--refresh must be positive, got %s", f.watch.Refresh)
	case f.watch.Limit < 0:
		err = fmt.Errorf("--limit must not be negative, got %d", f.watch.Limit)
	case !(f.rate > 0):
		err = fmt.Errorf("--scan-rate must be positive, got %g", f.rate)
	}
	if err != nil {
		return c.usageError(err)
	}
	r, err := locks.New(locks.Options{Target: opts.Target, Patterns: opts.Locks.Patterns, Groups: opts.Locks.Groups,
		Rate: f.rate, Max: opts.Locks.MaxTracked})
	if err != nil {
		return c.usageError(err)
	}
	tty, _ := terminalWidth(c.stdout)
	f.watch.JSON = f.format == "json"
	f.watch.Once = f.watch.Once || !tty
	f.watch.Clear = tty && !f.watch.Once
	if err := r.Watch(ctx, c.stdout, f.watch); err != nil {
		// A listing cut (more locks than --locks.max-tracked, a node
		// failing) was printed as far as it went: incomplete.
		fmt.Fprintf(c.stderr, "cachewatch locks: %s\n", redactErr(err))
		return exitIncomplete
	}
	return 0
}
