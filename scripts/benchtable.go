//go:build ignore

// Benchtable reads `go test -bench` output on stdin and prints it as compact
// tables: BenchmarkStampede as one row per shape and variant, with
// cachewatch's cold p99 divided by the best of its peers (rueidisaside,
// sturdyc, go-redis/cache) in the same round; BenchmarkStampedeHolderDeath
// as one row per variant; every other benchmark as one row of its metrics.
// With several rounds (-count, or the output of several runs), each figure
// is the median over the rounds. scripts/bench.sh runs it; -markdown
// prints Markdown tables, as docs/benchmarks.md has them:
//
//	go run scripts/benchtable.go [-markdown] < bench.out
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// result is one benchmark's rounds, each its metrics by unit.
type result struct {
	name   string
	rounds []map[string]float64
	units  []string // in the order the output gave them
}

// procsSuffix is the -GOMAXPROCS suffix go test appends to a name.
var procsSuffix = regexp.MustCompile(`-\d+$`)

func main() {
	flag.Parse()
	results, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results in the input")
		os.Exit(1)
	}
	groups := byTable(results)
	if len(groups.stampede) > 0 {
		printStampede(groups.stampede)
	}
	if len(groups.holderDeath) > 0 {
		printHolderDeath(groups.holderDeath)
	}
	if len(groups.other) > 0 {
		printOther(groups.other)
	}
}

// parse reads every "BenchmarkX  N  value unit …" line.
func parse(r io.Reader) ([]*result, error) {
	byName := map[string]*result{}
	var order []*result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		res := byName[name]
		if res == nil {
			res = &result{name: name}
			byName[name] = res
			order = append(order, res)
		}
		round := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			round[unit] = v
			if !slices.Contains(res.units, unit) {
				res.units = append(res.units, unit)
			}
		}
		res.rounds = append(res.rounds, round)
	}
	return order, sc.Err()
}

// tables are the results by the table they are printed in.
type tables struct {
	stampede    []*result // BenchmarkStampede's
	holderDeath []*result // BenchmarkStampedeHolderDeath's
	other       []*result
}

// byTable separates BenchmarkStampede's and BenchmarkStampedeHolderDeath's
// results from the others.
func byTable(results []*result) tables {
	var t tables
	for _, r := range results {
		switch {
		case strings.HasPrefix(r.name, "Stampede/") && strings.Count(r.name, "/") == 2:
			t.stampede = append(t.stampede, r)
		case strings.HasPrefix(r.name, "StampedeHolderDeath/") && strings.Count(r.name, "/") == 2:
			t.holderDeath = append(t.holderDeath, r)
		default:
			t.other = append(t.other, r)
		}
	}
	return t
}

// median returns the middle value of v (the mean of the two middle ones).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// values returns unit's value in each of r's rounds that reported it.
func (r *result) values(unit string) []float64 {
	var v []float64
	for _, round := range r.rounds {
		if x, ok := round[unit]; ok {
			v = append(v, x)
		}
	}
	return v
}

// metric returns unit's median over r's rounds, and whether r reported it.
func (r *result) metric(unit string) (float64, bool) {
	v := r.values(unit)
	return median(v), len(v) > 0
}

// peers are the libraries cachewatch's cold p99 is compared with.
var peers = []string{"rueidisaside", "sturdyc", "go-redis-cache"}

// noStale are the variants that keep nothing past their TTL: their stale
// crowd waits on a load, as a cold one does.
var noStale = []string{"rueidisaside", "go-redis-cache", "naive"}

// stampedeKey names one shape's variant.
type stampedeKey struct{ shape, variant string }

func printStampede(results []*result) {
	byKey := map[stampedeKey]*result{}
	rounds := 0
	for _, r := range results {
		parts := strings.Split(r.name, "/")
		byKey[stampedeKey{parts[1], parts[2]}] = r
		rounds = max(rounds, len(r.rounds))
	}
	fmt.Printf("BenchmarkStampede: %d round(s); medians over the rounds (min–max of the cold p99 and of the ratio).\n", rounds)
	fmt.Printf("Latencies in ms; rt = commands per process per key. ÷ best peer: cold p99 over the best of rueidisaside's,\n")
	fmt.Printf("sturdyc's and go-redis/cache's in the same round (1.00 = level). † keeps nothing past its TTL: the stale\n")
	fmt.Printf("crowd waits on a load. A coldfail shape's loader fails on the cold crowd: its latencies are the errors'.\n\n")
	var t table
	t.add("shape", "variant", "loader calls/refresh", "cold p50", "cold p99", "stale p50 / p99", "rt cold / stale", "failed cold / stale", "÷ best peer")
	shape := ""
	for _, r := range results {
		parts := strings.Split(r.name, "/")
		name := parts[1]
		if name == shape {
			name = ""
		}
		shape = parts[1]
		t.add(stampedeRow(name, parts[2], r, byKey)...)
	}
	t.print()
}

// stampedeRow is one variant's row of the stampede table.
func stampedeRow(shape, variant string, r *result, byKey map[stampedeKey]*result) []string {
	col := func(unit, format string) string {
		v, ok := r.metric(unit)
		if !ok {
			return "-"
		}
		if format == "ms" {
			format = msFormat(v)
		}
		return fmt.Sprintf(format, v)
	}
	stale := col("stale-p50-ms", "ms") + " / " + col("stale-p99-ms", "ms")
	if slices.Contains(noStale, variant) && stale != "- / -" {
		stale += " †"
	}
	cold99 := col("cold-p99-ms", "ms")
	if v := r.values("cold-p99-ms"); len(v) > 1 { // its range over the rounds
		lo, hi := slices.Min(v), slices.Max(v)
		cold99 += " (" + fmt.Sprintf(msFormat(lo), lo) + "–" + fmt.Sprintf(msFormat(hi), hi) + ")"
	}
	return []string{shape, variant, col("loader-calls/refresh", "%.2f"), col("cold-p50-ms", "ms"), cold99, stale,
		col("cold-rt/proc-key", "%.2f") + " / " + col("stale-rt/proc-key", "%.2f"),
		col("cold-failed", "%.0f") + " / " + col("stale-failed", "%.0f"), ratioToPeers(r, byKey, variant)}
}

// msFormat prints 3 decimals below 10 ms, 1 above.
func msFormat(v float64) string {
	if v < 10 {
		return "%.3f"
	}
	return "%.1f"
}

// ratioToPeers is a non-peer's cold p99 over the best peer's in the same
// round: the median over the rounds, and their range when there are
// several; "-" for a peer.
func ratioToPeers(r *result, byKey map[stampedeKey]*result, variant string) string {
	if slices.Contains(peers, variant) {
		return "-"
	}
	shape := strings.Split(r.name, "/")[1]
	var per []float64
	for i, round := range r.rounds {
		best := 0.0
		for _, p := range peers {
			pr := byKey[stampedeKey{shape, p}]
			if pr == nil || i >= len(pr.rounds) {
				continue
			}
			if v := pr.rounds[i]["cold-p99-ms"]; v > 0 && (best == 0 || v < best) {
				best = v
			}
		}
		if best > 0 {
			per = append(per, round["cold-p99-ms"]/best)
		}
	}
	switch len(per) {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf("%.3f", per[0])
	}
	return fmt.Sprintf("%.3f (%.3f–%.3f)", median(per), slices.Min(per), slices.Max(per))
}

// printHolderDeath prints BenchmarkStampedeHolderDeath: one row per shape
// and variant.
func printHolderDeath(results []*result) {
	fmt.Println("BenchmarkStampedeHolderDeath: the process that won a cold key's refresh is killed (SIGKILL) mid-load.")
	fmt.Println("Recovery: from the kill until another process's caller had the value; all served: until the last did")
	fmt.Println("(ms; p50 and p99 over the iterations, medians over the rounds). Loader calls for that refresh, the killed")
	fmt.Printf("one included; caller errors: errors the surviving callers got before the value, per iteration.\n\n")
	var t table
	t.add("shape", "variant", "recovery p50", "recovery p99", "all served p50", "all served p99", "loader calls", "caller errors")
	for _, r := range results {
		parts := strings.Split(r.name, "/")
		cells := parts[1:3]
		for _, unit := range []string{"recovery-p50-ms", "recovery-p99-ms", "all-served-p50-ms", "all-served-p99-ms", "loader-calls/refresh", "caller-errors"} {
			v, _ := r.metric(unit)
			cells = append(cells, format(v))
		}
		t.add(cells...)
	}
	t.print()
}

// printOther prints one row per benchmark: its metrics' medians, grouped by
// the top-level benchmark.
func printOther(results []*result) {
	group := ""
	var t table
	for _, r := range results {
		top, sub, _ := strings.Cut(r.name, "/")
		if top != group {
			if group != "" {
				t.print()
				t = table{}
			}
			group = top
			fmt.Printf("Benchmark%s: %d round(s); medians over the rounds.\n\n", top, len(r.rounds))
			t.add("case", "metrics")
		}
		if sub == "" {
			sub = top
		}
		var cells []string
		for _, unit := range r.units {
			v, _ := r.metric(unit)
			if unit == "ns/op" && v == 0 {
				continue
			}
			cells = append(cells, format(v)+" "+unit)
		}
		t.add(sub, strings.Join(cells, ", "))
	}
	t.print()
}

// markdown prints the tables as Markdown (docs/benchmarks.md) rather than
// aligned text.
var markdown = flag.Bool("markdown", false, "print Markdown tables")

// table is rows of cells, the first the header.
type table struct{ rows [][]string }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// print writes the table and a blank line: aligned columns, or Markdown.
func (t *table) print() {
	if *markdown {
		for i, row := range t.rows {
			fmt.Printf("| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				fmt.Println(strings.Repeat("|---", len(row)) + "|")
			}
		}
		fmt.Println()
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, row := range t.rows {
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	w.Flush()
	fmt.Println()
}

// format prints v with at most 4 significant digits, without an exponent
// below a billion.
func format(v float64) string {
	switch {
	case v == float64(int64(v)) && v < 1e9 && v > -1e9:
		return strconv.FormatInt(int64(v), 10)
	case v >= 1000 || v <= -1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}
