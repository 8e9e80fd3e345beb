//go:build ignore

// Benchtable reads `go test -bench` output on stdin and prints it as compact
// tables: BenchmarkStampede as one row per shape and variant, with
// cachewatch's cold p99 divided by the better of its in-process peers
// (sturdyc, go-redis/cache) in the same round; every other benchmark as one
// row of its metrics. With several rounds (-count), each figure is the
// median over the rounds. scripts/bench.sh runs it:
//
//	go run scripts/benchtable.go < bench.out
package main

import (
	"bufio"
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
	results, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results in the input")
		os.Exit(1)
	}
	stampede, other := splitStampede(results)
	if len(stampede) > 0 {
		printStampede(stampede)
	}
	if len(other) > 0 {
		printOther(other)
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

// splitStampede separates BenchmarkStampede's results from the others.
func splitStampede(results []*result) (stampede, other []*result) {
	for _, r := range results {
		if strings.HasPrefix(r.name, "Stampede/") && strings.Count(r.name, "/") == 2 {
			stampede = append(stampede, r)
		} else {
			other = append(other, r)
		}
	}
	return stampede, other
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

// metric returns unit's median over r's rounds, and whether r reported it.
func (r *result) metric(unit string) (float64, bool) {
	var v []float64
	for _, round := range r.rounds {
		if x, ok := round[unit]; ok {
			v = append(v, x)
		}
	}
	return median(v), len(v) > 0
}

// peers are the in-process coalescers cachewatch's cold p99 is compared with.
var peers = []string{"sturdyc", "go-redis-cache"}

func printStampede(results []*result) {
	type key struct{ shape, variant string }
	byKey := map[key]*result{}
	var shapes []string
	rounds := 0
	for _, r := range results {
		parts := strings.Split(r.name, "/")
		k := key{parts[1], parts[2]}
		byKey[k] = r
		if !slices.Contains(shapes, k.shape) {
			shapes = append(shapes, k.shape)
		}
		rounds = max(rounds, len(r.rounds))
	}
	fmt.Printf("BenchmarkStampede: %d round(s); medians over the rounds. Latencies in ms. ÷ peer: cold p99 over the\n", rounds)
	fmt.Printf("better of sturdyc's and go-redis/cache's in the same round (median over the rounds; 1.00 = level).\n\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "shape\tvariant\tloader calls/refresh\tcold p50\tcold p99\tstale p50\tstale p99\tfailed cold/stale\t÷ peer")
	for _, shape := range shapes {
		first := true
		for _, r := range results {
			parts := strings.Split(r.name, "/")
			if parts[1] != shape {
				continue
			}
			variant := parts[2]
			col := func(unit, format string) string {
				v, ok := r.metric(unit)
				if !ok {
					return "-"
				}
				if format == "ms" { // 3 decimals below 10 ms, 1 above
					format = "%.1f"
					if v < 10 {
						format = "%.3f"
					}
				}
				return fmt.Sprintf(format, v)
			}
			ratio := "-"
			if !slices.Contains(peers, variant) {
				var per []float64
				for i, round := range r.rounds {
					best := 0.0
					for _, p := range peers {
						pr := byKey[key{shape, p}]
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
				if len(per) > 0 {
					ratio = fmt.Sprintf("%.3f", median(per))
				}
			}
			name := shape
			if !first {
				name = ""
			}
			first = false
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\n", name, variant,
				col("loader-calls/refresh", "%.2f"), col("cold-p50-ms", "ms"), col("cold-p99-ms", "ms"),
				col("stale-p50-ms", "ms"), col("stale-p99-ms", "ms"),
				col("cold-failed", "%.0f"), col("stale-failed", "%.0f"), ratio)
		}
	}
	w.Flush()
	fmt.Println()
}

// printOther prints one row per benchmark: its metrics' medians, grouped by
// the top-level benchmark.
func printOther(results []*result) {
	group := ""
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, r := range results {
		top, sub, _ := strings.Cut(r.name, "/")
		if top != group {
			if group != "" {
				w.Flush()
				fmt.Println()
			}
			group = top
			fmt.Printf("Benchmark%s: %d round(s); medians over the rounds.\n", top, len(r.rounds))
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
		fmt.Fprintf(w, "  %s\t%s\n", sub, strings.Join(cells, "\t"))
	}
	w.Flush()
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
