package dashboards_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cachewatch/cachewatch/dashboards"
)

const testToken = "glsa_secret_token_value"

// fakeGrafana records what Push sends and answers with status and body.
type fakeGrafana struct {
	mu       sync.Mutex
	requests []pushed
	status   int
	body     string
}

type pushed struct {
	method, path, auth, contentType string
	body                            map[string]any
}

func (g *fakeGrafana) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	g.mu.Lock()
	g.requests = append(g.requests, pushed{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body})
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(g.status)
	_, _ = io.WriteString(w, g.body)
}

func TestPush(t *testing.T) {
	g := &fakeGrafana{status: http.StatusOK, body: `{"status":"success","version":1}`}
	srv := httptest.NewServer(g)
	defer srv.Close()

	// Grafana behind a path prefix, as with a reverse proxy.
	err := dashboards.Push(context.Background(), srv.URL+"/grafana/", testToken, dashboards.PushOptions{FolderUID: "ops", Message: "cachewatch"})
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, r := range g.requests {
		if r.method != http.MethodPost || r.path != "/grafana/api/dashboards/db" {
			t.Errorf("request %s %s, want POST /grafana/api/dashboards/db", r.method, r.path)
		}
		if r.auth != "Bearer "+testToken || r.contentType != "application/json" {
			t.Errorf("Authorization %q, Content-Type %q", r.auth, r.contentType)
		}
		if r.body["overwrite"] != true || r.body["folderUid"] != "ops" || r.body["message"] != "cachewatch" {
			t.Errorf("body fields: overwrite %v, folderUid %v, message %v", r.body["overwrite"], r.body["folderUid"], r.body["message"])
		}
		d, _ := r.body["dashboard"].(map[string]any)
		uid, _ := d["uid"].(string)
		if d["title"] != wantBoards[uid] || d["editable"] != false || len(objects(d["panels"])) == 0 {
			t.Errorf("dashboard in the body: uid %q title %v editable %v, %d panels", uid, d["title"], d["editable"], len(objects(d["panels"])))
		}
		uids = append(uids, uid)
	}
	want := []string{dashboards.ContentionUID, dashboards.RedisUID, dashboards.KeyspaceUID}
	if strings.Join(uids, ",") != strings.Join(want, ",") {
		t.Errorf("pushed %v, want %v", uids, want)
	}
}

func TestPushGrafanaErrorIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
		status           int
	}{
		{"json", `{"message":"Invalid API key","status":"unauthorized"}`, "401 Unauthorized: Invalid API key", http.StatusUnauthorized},
		{"html", "<html>\n<body>\nBad Gateway\n</body>\n</html>\n", "502 Bad Gateway: <html> <body> Bad Gateway </body> </html>", http.StatusBadGateway},
		{"empty", "", "500 Internal Server Error: no message", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &fakeGrafana{status: tc.status, body: tc.body}
			srv := httptest.NewServer(g)
			defer srv.Close()
			err := dashboards.Push(context.Background(), srv.URL, testToken, dashboards.PushOptions{})
			var ge *dashboards.GrafanaError
			if !errors.As(err, &ge) || ge.StatusCode != tc.status || ge.UID != dashboards.ContentionUID {
				t.Fatalf("err = %v, want a GrafanaError %d for the first board", err, tc.status)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\r\n") || !strings.Contains(msg, tc.want) || strings.Contains(msg, testToken) {
				t.Errorf("error %q: want one line containing %q and no token", msg, tc.want)
			}
			if len(g.requests) != 1 {
				t.Errorf("%d requests, want Push to stop at the first refusal", len(g.requests))
			}
		})
	}
}

func TestPushBadInput(t *testing.T) {
	ctx := context.Background()
	if err := dashboards.Push(ctx, "http://localhost:3000", "", dashboards.PushOptions{}); !errors.Is(err, dashboards.ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
	for _, u := range []string{"", "localhost:3000", "ftp://grafana", "http://"} {
		if err := dashboards.Push(ctx, u, testToken, dashboards.PushOptions{}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	err := dashboards.Push(ctx, srv.URL, testToken, dashboards.PushOptions{})
	if err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("unreachable Grafana: %v", err)
	}
}
