// Command cachewatch is the one binary of cachewatch: it runs the demo, the
// Prometheus exporter and the one-shot doctor against a Redis, and writes
// the generated dashboards and alert rules.
//
// Usage:
//
//	cachewatch [--log.level=info] [--log.format=logfmt] <command> [flags]
//
// Run `cachewatch --help` for the list of commands and `cachewatch <command>
// --help` for a command's flags. Flags follow the Prometheus exporter
// conventions (kingpin, `--web.*` from exporter-toolkit, `--log.*` from
// promslog). Each command only wires flags to the library packages; the
// behaviour lives in those packages.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/redis/go-redis/v9"
)

// Exit status of a command-line error: an unknown or invalid flag.
const exitUsage = 2

// command is one subcommand. Each lives in its own file and registers itself
// in init, so adding a command touches no other file:
//
//	func init() { register(command{name: "demo", help: "…", define: defineDemo}) }
//
//	func defineDemo(cmd *kingpin.CmdClause) action {
//		addr := cmd.Flag("redis.addr", "…").Default("…").String()
//		return func(ctx context.Context, c *cli) int {
//			if bad { return c.usageError(fmt.Errorf("--redis.addr %q: …", *addr)) }
//			c.logger.Info("…") // --log.level / --log.format already applied
//			return 0
//		}
//	}
//
// Connection flags shared with exporter and doctor: redisFlags.register.
type command struct {
	name, help string
	// define adds the command's flags to cmd and returns what to run when
	// the command is chosen. It is called once per run, so flag values
	// never leak from one run to the next.
	define func(cmd *kingpin.CmdClause) action
}

// action runs a chosen command and returns its exit status.
type action func(ctx context.Context, c *cli) int

// cli is what an action gets: the output streams and the logger built from
// --log.level and --log.format.
type cli struct {
	command        string
	stdout, stderr io.Writer
	logger         *slog.Logger
}

// usageError reports a rejected flag value as one line and returns the
// usage exit status.
func (c *cli) usageError(err error) int {
	fmt.Fprintf(c.stderr, "cachewatch %s: error: %s\n", c.command, redactErr(err))
	return exitUsage
}

var commands []command

func register(c command) {
	for _, o := range commands {
		if o.name == c.name {
			panic("cachewatch: command registered twice: " + c.name)
		}
	}
	commands = append(commands, c)
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// terminated carries the status kingpin asks to exit with (after --help or
// --version) out of Parse without exiting the process.
type terminated int

// commandLine is the parser of the command line, the action of each command
// by its full name, and the logger's configuration that the global --log.*
// flags fill.
type commandLine struct {
	app       *kingpin.Application
	actions   map[string]action
	logConfig *promslog.Config
}

// newCommandLine builds the command line: the global flags, every command
// with its flags, and the action of each command. Parsing a help or version
// flag panics with terminated instead of exiting.
func newCommandLine(stdout, stderr io.Writer) commandLine {
	app := kingpin.New("cachewatch", "cachewatch makes Redis cache and lock contention visible.")
	app.UsageWriter(stdout).ErrorWriter(stderr)
	app.Terminate(func(status int) { panic(terminated(status)) })
	app.HelpFlag.Short('h')
	app.Version(versionString())
	logConfig := &promslog.Config{Writer: stderr}
	promslogflag.AddFlags(app, logConfig)
	actions := map[string]action{}
	for _, c := range commands {
		cmd := app.Command(c.name, c.help)
		actions[cmd.FullCommand()] = c.define(cmd)
	}
	return commandLine{app: app, actions: actions, logConfig: logConfig}
}

// run parses args, builds the logger and runs the chosen command.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	cl := newCommandLine(stdout, stderr)
	defer func() {
		if r := recover(); r != nil {
			t, ok := r.(terminated)
			if !ok {
				panic(r)
			}
			code = int(t)
			if code != 0 {
				code = exitUsage
			}
		}
	}()
	args = doubleDash(cl.app, args)
	chosen, err := cl.app.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "cachewatch: error: %s, try --help\n", redact(nameFlag(cl.app, args, err)))
		return exitUsage
	}
	logger := promslog.New(cl.logConfig)
	redis.SetLogger(redisLogger{logger})
	return cl.actions[chosen](ctx, &cli{command: chosen, stdout: stdout, stderr: stderr, logger: logger})
}

// doubleDash turns the Go flag package's single-dash long flags
// (-redis.url), which many exporters accept, into kingpin's --redis.url.
// Only names of known flags are rewritten, so values such as -1 are left
// alone, and a negative number is joined to the flag before it when that
// flag takes a value (--locks.holders -1 becomes --locks.holders=-1), as
// kingpin would read it as a short flag; nothing after a bare "--" is
// touched.
func doubleDash(app *kingpin.Application, args []string) []string {
	flags := map[string]*kingpin.FlagModel{}
	m := app.Model()
	for _, f := range m.Flags {
		flags[f.Name] = f
	}
	for _, c := range m.Commands {
		for _, f := range c.Flags {
			flags[f.Name] = f
		}
	}
	takesValue := func(arg string) bool {
		name, ok := strings.CutPrefix(arg, "--")
		f := flags[name]
		return ok && f != nil && !f.IsBoolFlag()
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		switch {
		case len(a) > 2 && a[0] == '-' && a[1] != '-' && flags[name] != nil:
			a = "-" + a
		case negativeNumber(a) && len(out) > 0 && takesValue(out[len(out)-1]):
			out[len(out)-1] += "=" + a
			continue
		}
		out = append(out, a)
	}
	return out
}

// negativeNumber reports whether arg is a number below zero, such as -1.
func negativeNumber(arg string) bool {
	_, err := strconv.ParseFloat(arg, 64)
	return err == nil && strings.HasPrefix(arg, "-")
}

// nameFlag prefixes a value error with the flag it came from: kingpin's own
// messages ("time: invalid duration") do not say which flag was wrong.
func nameFlag(app *kingpin.Application, args []string, err error) string {
	ctx, perr := app.ParseContext(args)
	if perr != nil || ctx == nil {
		return err.Error()
	}
	for _, el := range ctx.Elements {
		f, ok := el.Clause.(*kingpin.FlagClause)
		if ok && el.Value != nil && f.Model().Value.Set(*el.Value) != nil {
			return "--" + f.Model().Name + ": " + err.Error()
		}
	}
	return err.Error()
}

// redisLogger routes go-redis's own log lines (pool and dial errors)
// through the command's logger, redacted like every other line.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, redact(strings.TrimSpace(fmt.Sprintf(format, v...))), "component", "go-redis")
}
