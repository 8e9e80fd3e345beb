package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNoToken is returned by Push when no Grafana token is given.
var ErrNoToken = errors.New("dashboards: no Grafana token (a service account token with the dashboards:write permission)")

// PushOptions configure Push. The zero value is usable.
type PushOptions struct {
	// Client sends the requests; nil means a client with a 30 s timeout.
	Client *http.Client
	// FolderUID puts the boards in a Grafana folder; "" is the General folder.
	FolderUID string
	// Message is the note Grafana keeps with the saved version.
	Message string
}

// GrafanaError is Grafana's refusal of one board: its HTTP status and the
// message it gave. Its Error is one line.
type GrafanaError struct {
	UID        string // the board Grafana refused
	StatusCode int
	Message    string
}

// Error names the board, the status and Grafana's message, on one line.
func (e *GrafanaError) Error() string {
	return fmt.Sprintf("dashboards: Grafana refused %s: %d %s: %s",
		e.UID, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Push saves every board in the Grafana at grafanaURL through its HTTP API
// (POST /api/dashboards/db, overwriting the board with the same UID),
// authenticated by token as a bearer token. It stops at the first board
// Grafana refuses, returning a *GrafanaError. The token never appears in
// an error.
func Push(ctx context.Context, grafanaURL, token string, opts PushOptions) error {
	if token == "" {
		return ErrNoToken
	}
	base, err := url.Parse(grafanaURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("dashboards: Grafana URL %q: want http(s)://host[:port][/path]", grafanaURL)
	}
	endpoint := base.JoinPath("api", "dashboards", "db").String()
	client := opts.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	ds, err := Dashboards()
	if err != nil {
		return err
	}
	for _, d := range ds {
		if err := pushOne(ctx, client, endpoint, token, d, opts); err != nil {
			return err
		}
	}
	return nil
}

// saveRequest is the body of POST /api/dashboards/db.
type saveRequest struct {
	Dashboard any    `json:"dashboard"`
	Overwrite bool   `json:"overwrite"`
	FolderUID string `json:"folderUid,omitempty"`
	Message   string `json:"message,omitempty"`
}

func pushOne(ctx context.Context, client *http.Client, endpoint, token string, d Dashboard, opts PushOptions) error {
	body, err := json.Marshal(saveRequest{Dashboard: d.Model, Overwrite: true, FolderUID: opts.FolderUID, Message: opts.Message})
	if err != nil {
		return fmt.Errorf("dashboards: encode %s: %w", d.UID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("dashboards: push %s: %w", d.UID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("dashboards: push %s: %w", d.UID, err)
	}
	defer resp.Body.Close()
	// Grafana's answers are small; a large one is not Grafana.
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return &GrafanaError{UID: d.UID, StatusCode: resp.StatusCode, Message: grafanaMessage(answer)}
	}
	return nil
}

// grafanaMessage is the "message" of a Grafana error answer, or the start
// of the body when it is not Grafana's JSON, on one line.
func grafanaMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	msg := string(body)
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200]) + "…"
	}
	if msg == "" {
		msg = "no message"
	}
	return msg
}
