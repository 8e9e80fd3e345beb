package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

func freeListenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestFlagErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown flag", []string{"exporter", "--nope"}, "unknown long flag '--nope'"},
		{"bad duration", []string{"exporter", "--sample.interval", "soon"}, `--sample.interval: time: invalid duration "soon"`},
		{"positional", []string{"exporter", "extra"}, "unexpected extra"},
		{"url and addr", []string{"exporter", "--redis.url", "redis://h:1", "--redis.addr", "h:2"}, "not both"},
		{"url and alias", []string{"doctor", "--redis.url", "redis://h:1", "--redis", "redis://h:2"}, "--redis and --redis.url disagree"},
		{"password in url", []string{"exporter", "--redis.url", "redis://u:hunter2@h:1"}, "must not contain a password"},
		{"password in query", []string{"exporter", "--redis.url", "redis://h:1/0?password=hunter2"}, `--redis.url: the Redis URL must not contain a password (parameter "password"): use $CACHEWATCH_REDIS_PASSWORD`},
		{"password in alias query", []string{"doctor", "--redis", "redis://h:1?requirepass=hunter2"}, `parameter "requirepass"`},
		{"url fragment", []string{"exporter", "--redis.url", "redis://h:1/0#hunter2"}, `--redis.url: bad Redis URL "redis://h:1/0": a #fragment is not allowed`},
		{"unknown url parameter", []string{"exporter", "--redis.url", "redis://h:1/?protocol=hunter2"}, `--redis.url: unknown Redis URL parameter "protocol"`},
		{"bad url parameter", []string{"exporter", "--redis.url", "redis://h:1/?dial_timeout=-1s"}, "--redis.url: bad Redis URL parameter dial_timeout: want a positive duration"},
		{"url port", []string{"exporter", "--redis.url", "redis://h:70000"}, `--redis.url: bad Redis URL "redis://h:70000": port "70000" is outside 1-65535`},
		{"url without scheme", []string{"doctor", "--redis.url", "127.0.0.1:6390"}, `--redis.url: the Redis URL "127.0.0.1:6390" has no scheme: did you mean redis://127.0.0.1:6390?`},
		{"host without scheme", []string{"exporter", "--redis.url", "localhost:6390/2"}, `did you mean redis://localhost:6390/2?`},
		{"password without scheme", []string{"exporter", "--redis.url", "u:hunter2@h:1"}, "has no scheme: want redis://[user@]host:port[/db]"},
		{"addr port", []string{"doctor", "--redis.addr", "h:0"}, `--redis.addr "h:0": port "0" is outside 1-65535`},
		{"listen port", []string{"exporter", "--web.listen-address", ":65536"}, `--web.listen-address ":65536": port "65536" is outside 1-65535`},
		{"bad scheme", []string{"exporter", "--redis.url", "http://h:1"}, "scheme must be redis or rediss"},
		{"bad mode", []string{"exporter", "--redis.mode", "sentinel"}, "--redis.mode: enum value must be one of auto,standalone,cluster"},
		{"missing password file", []string{"exporter", "--redis.password-file", filepath.Join(dir, "none")}, "--redis.password-file"},
		{"bad rule", []string{"exporter", "--keygroup.rule", "session:*"}, "want glob=group"},
		{"bad path", []string{"exporter", "--web.telemetry-path", "metrics"}, "must start with /"},
		{"bad web config", []string{"exporter", "--web.config.file", filepath.Join(dir, "none.yml")}, "none.yml"},
		{"zero budget", []string{"exporter", "--sample.max-keys", "0"}, "--sample.max-keys must be positive"},
		{"bad log level", []string{"exporter", "--log.level", "loud"}, "--log.level: "},
		{"bad log format", []string{"doctor", "--log.format", "yaml"}, "--log.format: "},
		{"doctor format", []string{"doctor", "--format", "yaml"}, "--format: enum value must be one of text,json"},
		{"doctor interval", []string{"doctor", "--interval", "0s"}, "--interval must be positive"},
		{"doctor miss ratio", []string{"doctor", "--miss-ratio", "1.5"}, "--miss-ratio must be in (0, 1]"},
		{"doctor sync score", []string{"doctor", "--sync-score", "0.5"}, "--sync-score must be above 1"},
		{"doctor queue length", []string{"doctor", "--queue-length", "0"}, "--queue-length must be at least 1"},
		{"doctor hot keys", []string{"doctor", "--hot-keys", "0"}, "--hot-keys must be in 1-1000"},
		{"doctor has no web flags", []string{"doctor", "--web.listen-address", ":1"}, "unknown long flag '--web.listen-address'"},
		{"max-duration above interval", []string{"exporter", "--sample.max-duration", "20s"}, "--sample.max-duration 20s must be at most 90% of --sample.interval 15s"},
		{"max-duration of a short interval", []string{"exporter", "--sample.interval", "5s", "--sample.max-duration", "5s"}, "must be at most 90% of --sample.interval 5s"},
		{"zero max-duration", []string{"doctor", "--sample.max-duration", "0s"}, "--sample.max-duration must be positive"},
		{"scan budget", []string{"exporter", "--locks.scan-budget", "0"}, "--locks.scan-budget must be in (0, 1]"},
		{"scan budget above 1", []string{"doctor", "--locks.scan-budget", "1.5"}, "--locks.scan-budget must be in (0, 1]"},
		{"notifications mode", []string{"exporter", "--locks.notifications", "on"}, "--locks.notifications: enum value must be one of auto,existing,enable,off"},
		{"reconcile", []string{"exporter", "--locks.reconcile", "0s"}, "--locks.reconcile must be positive"},
		{"lock groups", []string{"exporter", "--locks.max-groups", "0"}, "--locks.max-groups must be positive"},
		{"memory sample", []string{"exporter", "--keys.memory-sample=-1"}, "--keys.memory-sample must not be negative"},
		{"reply cap", []string{"exporter", "--queue.max-reply-bytes", "0"}, "--queue.max-reply-bytes must be positive"},
		{"targets and redis flags", []string{"exporter", "--targets.file", writeFile(t, dir, "t1.yml", "targets: [{name: a, addrs: ['h:1']}]"), "--redis.addr", "h:2"}, "--targets.file and --redis.* connection flags"},
		{"targets file missing", []string{"exporter", "--targets.file", filepath.Join(dir, "none.yml")}, "--targets.file: open"},
		{"targets password inline", []string{"exporter", "--targets.file", writeFile(t, dir, "t2.yml", "targets:\n  - name: a\n    addrs: ['h:1']\n    password: hunter2\n")}, "line 4: unknown field password (use password_file or password_env)"},
		{"targets duplicate name", []string{"exporter", "--targets.file", writeFile(t, dir, "t3.yml", "targets: [{name: a, addrs: ['h:1']}, {name: a, addrs: ['h:2']}]")}, `target 2 ("a"): name used twice`},
		{"targets no address", []string{"exporter", "--targets.file", writeFile(t, dir, "t4.yml", "targets: [{name: a}]")}, "set one of url and addrs"},
		{"targets password env unset", []string{"exporter", "--targets.file", writeFile(t, dir, "t5.yml", "targets: [{name: a, addrs: ['h:1'], password_env: CACHEWATCH_TEST_UNSET}]")}, "$CACHEWATCH_TEST_UNSET is empty or unset"},
		{"targets bad port", []string{"exporter", "--targets.file", writeFile(t, dir, "t6.yml", "targets: [{name: a, addrs: ['h:0']}]")}, `target 1 ("a"): --redis.addr "h:0"`},
		{"targets bad yaml", []string{"exporter", "--targets.file", writeFile(t, dir, "t7.yml", "targets: [hunter2")}, "not valid YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), c.args, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), c.msg) {
				t.Fatalf("code %d, stderr %q; want 2 and %q", code, errOut.String(), c.msg)
			}
			if lines := strings.Count(strings.TrimSpace(errOut.String()), "\n"); lines != 0 || strings.Contains(errOut.String(), "goroutine") {
				t.Fatalf("want one line, got:\n%s", errOut.String())
			}
			if strings.Contains(errOut.String(), "hunter2") {
				t.Fatal("the password was printed")
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One exporter watches several targets from a file, each with its own
// password (from a file, from a variable): every series carries its target,
// up and the sampler's health included.
func TestExporterTargetsFile(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	if err := a.Client(t).ConfigSet(ctx, "requirepass", "secret-a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).ConfigSet(ctx, "requirepass", "secret-b").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("CACHEWATCH_TEST_B_PASSWORD", "secret-b")
	file := writeFile(t, dir, "targets.yml", "targets:\n"+
		"  - name: orders\n    url: redis://"+a.Addr+"\n    password_file: "+writeFile(t, dir, "pw-a", "secret-a\n")+"\n"+
		"  - name: sessions\n    addrs: ['"+b.Addr+"']\n    password_env: CACHEWATCH_TEST_B_PASSWORD\n    mode: standalone\n")
	listen := freeListenAddr(t)
	ctx, cancel := context.WithCancel(ctx)
	var stderr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"exporter", "--targets.file", file, "--web.listen-address", listen, "--sample.interval", "200ms"}, io.Discard, &stderr)
	}()
	waitForBody(t, "http://"+listen+"/metrics", "", "", `cachewatch_exporter_up{node="`+b.Addr+`",target="sessions"} 1`)
	body := waitForBody(t, "http://"+listen+"/metrics", "", "", `cachewatch_exporter_up{node="`+a.Addr+`",target="orders"} 1`)
	for _, want := range []string{
		`cachewatch_exporter_sample_duration_seconds{node="` + a.Addr + `",target="orders"}`,
		`cachewatch_exporter_data_timestamp_seconds{family="server",node="` + b.Addr + `",target="sessions"}`,
		`cachewatch_keygroup_overflow_total{target="sessions"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s in:\n%s", want, body)
		}
	}
	metrictest.PromtoolCheck(t, body)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "secret-") {
		t.Fatal("a password was logged")
	}
}

// Help and --version go to stdout in the exporter style: -h, --flags.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"exporter", "-h"}, {"exporter", "--help"}, {"help", "exporter"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%v: code %d\n%s", args, code, errOut.String())
		}
		for _, want := range []string{"--web.listen-address", "--web.config.file", "web.systemd-socket", "--log.level", "--log.format", "--redis.url"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help lacks %s:\n%s", args, want, out.String())
			}
		}
		if strings.Contains(out.String(), "--redis.password=") || strings.Contains(out.String(), "--redis=") {
			t.Errorf("%v: help shows a password flag or the hidden alias:\n%s", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"doctor", "--help"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "--miss-ratio") || strings.Contains(out.String(), "--web.listen-address") {
		t.Fatalf("doctor --help: code %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "cachewatch ") {
		t.Fatalf("--version: code %d, out %q", code, out.String())
	}
	// Single-dash long flags (the Go flag package's form) work too.
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"doctor", "-redis.url", "redis://h:1", "-miss-ratio=2"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "--miss-ratio must be in (0, 1], got 2") {
		t.Fatalf("single-dash flags: code %d, %s", code, errOut.String())
	}
	// The --log.* flags are global: before or after the command.
	out.Reset()
	if code := run(context.Background(), []string{"--log.level=error", "version", "--log.format=json"}, &out, &errOut); code != 0 {
		t.Fatalf("global log flags: code %d, %s", code, errOut.String())
	}
}

// The command wires flags, the password file, sampling and the web server:
// /metrics shows the node up, the landing page links to it, and basic auth
// from --web.config.file is enforced.
func TestExporterCommand(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const password = "exporter-secret"
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	for path, content := range map[string]string{pwFile: password + "\n", webCfg: "basic_auth_users:\n  prom: " + string(hash) + "\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	listen := freeListenAddr(t)
	ctx, cancel := context.WithCancel(ctx)
	var stderr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"exporter", "--redis.url", "redis://" + srv.Addr, "--redis.password-file", pwFile,
			"--web.listen-address", listen, "--web.config.file", webCfg, "--sample.interval", "100ms", "--queue", "nosuch"}, io.Discard, &stderr)
	}()
	body := waitForBody(t, "http://"+listen+"/metrics", "prom", "scrape-pw", `cachewatch_exporter_up{node="`+srv.Addr+`"} 1`)
	if !strings.Contains(body, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
	metrictest.PromtoolCheck(t, body)
	if code := httpStatus(t, "http://"+listen+"/metrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("scrape without credentials: %d, want 401", code)
	}
	landing := waitForBody(t, "http://"+listen+"/", "prom", "scrape-pw", `href="/metrics"`)
	if !strings.Contains(landing, "cachewatch exporter") {
		t.Errorf("landing page: %s", landing)
	}
	// Every link of the landing page is served.
	for _, m := range regexp.MustCompile(`href="(/[^"]*)"`).FindAllStringSubmatch(landing, -1) {
		if code := httpStatus(t, "http://"+listen+m[1], "prom", "scrape-pw"); code != http.StatusOK {
			t.Errorf("the landing page links %s, which answers %d", m[1], code)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), password) {
		t.Fatal("the Redis password was logged")
	}
	// A --queue that does not exist is logged, once.
	if n := strings.Count(stderr.String(), "queue=nosuch"); n != 1 {
		t.Fatalf("missing queue logged %d times:\n%s", n, stderr.String())
	}
}

// --locks.holders reads as Locks.Holders does: 0 is the default (the
// holders of each lock group's 5 longest-held locks), a negative value
// exports none, given after a space as after "=".
func TestExporterLockHoldersFlag(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	now := time.Now()
	for i := range 7 { // seven services, one lock each
		tok, err := lockholder.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		v := lockholder.NewIdentity(fmt.Sprintf("svc-%d", i)).Value(tok, now.Add(-time.Duration(i+1)*time.Minute))
		if err := rdb.Set(context.Background(), fmt.Sprintf("lock:job:%d", i), v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	group := `{key_group="lock:job:*",node="` + srv.Addr + `"}`
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--locks.holders", "0"}, 5},
		{[]string{"--locks.holders", "-1"}, 0},
		{[]string{"--locks.holders=-1"}, 0},
	} {
		listen := freeListenAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncbuf.Buffer
		done := make(chan int)
		go func() {
			done <- run(ctx, append([]string{"exporter", "--redis.addr", srv.Addr, "--web.listen-address", listen,
				"--sample.interval", "100ms", "--keygroup.min-keys", "1"}, c.args...), io.Discard, &stderr)
		}()
		// Long-held locks are counted once the holders' values are read.
		want := "cachewatch_exporter_locks_long_held" + group
		if c.want > 0 {
			want = "cachewatch_exporter_lock_holder_held_seconds{"
		}
		body := waitForBody(t, "http://"+listen+"/metrics", "", "", want)
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr.String())
		}
		if !strings.Contains(body, "cachewatch_exporter_locks_held"+group+" 7") {
			t.Fatalf("%v: the seven locks are not shown:\n%s", c.args, body)
		}
		if n := strings.Count(body, "cachewatch_exporter_lock_holder_held_seconds{"); n != c.want {
			t.Errorf("%v: %d holder series, want %d", c.args, n, c.want)
		}
	}
}

// A taken port is reported alone: no sampling starts, so nothing else
// fails for a reason the user did not cause.
func TestExporterTakenPort(t *testing.T) {
	srv := redistest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stderr syncbuf.Buffer
	code := run(context.Background(), []string{"exporter", "--redis.url", "redis://" + srv.Addr,
		"--web.listen-address", l.Addr().String()}, io.Discard, &stderr)
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "address already in use") {
		t.Fatalf("exit %d, stderr:\n%s\nwant 1 and only the bind failure", code, stderr.String())
	}
}

func httpStatus(t *testing.T, url, user, pw string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if user != "" {
		req.SetBasicAuth(user, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitForBody fetches url until the body contains want.
func waitForBody(t *testing.T, url, user, pw, want string) string {
	t.Helper()
	var body string
	err := poll.Check(context.Background(), poll.Bound, 50*time.Millisecond, func() error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.SetBasicAuth(user, pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); !strings.Contains(body, want) {
			return fmt.Errorf("no %q in:\n%s", want, body)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return body
}
