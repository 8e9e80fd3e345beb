package dashboards_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/cachewatch/cachewatch/dashboards"
)

func Example() {
	boards, err := dashboards.Dashboards()
	if err != nil {
		panic(err)
	}
	for _, b := range boards {
		fmt.Println(b.UID, "·", b.Title)
	}
	// dashboards.Write("grafana/dashboards") writes them as <uid>.json.
	// Output:
	// cachewatch-contention · cachewatch / Service contention
	// cachewatch-redis · cachewatch / Redis commands & pool
	// cachewatch-keyspace · cachewatch / Keyspace & locks
}

func ExamplePush() {
	// A stand-in for Grafana that answers like a read-only token.
	grafana := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"Access denied: missing dashboards:write"}`)
	}))
	defer grafana.Close()

	err := dashboards.Push(context.Background(), grafana.URL, "token-from-env-or-file", dashboards.PushOptions{})
	fmt.Println(err)
	// Output:
	// dashboards: Grafana refused cachewatch-contention: 403 Forbidden: Access denied: missing dashboards:write
}
