// Command session is an HTTP session middleware on a shared Redis:
// a lease on the session while a request mutates it, a sliding TTL that is
// only extended past a threshold of its life, compare-and-set versioned
// session writes, and bulk logout by UNLINK. Every decision is measured by
// cachewatch and served on /metrics.
//
//	go run ./examples/session --redis redis://localhost:6379
//	curl -c jar -b jar -X POST 'localhost:8080/cart?item=book'
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/examples/internal/serve"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// Session is what the service keeps per visitor.
type Session struct {
	UserID string   `json:"user_id"`
	Cart   []string `json:"cart"`
	Views  int      `json:"views"`
}

// ErrConflict: another writer stored a newer version of the session first.
// It cannot happen while every writer holds the session's lease; the CAS
// write is the safety net for a lease that ran out mid-request.
var ErrConflict = errors.New("session: written concurrently, retry")

// Store keeps sessions in Redis, one versioned hash per session.
type Store struct {
	cw  *instrument.Client
	rdb redis.UniversalClient
	// Life is a session's sliding lifetime; SlideAfter the fraction of it
	// that must pass before a read extends it again (so a busy session's
	// expiry is rewritten once per slice of its life, not on every request).
	Life       time.Duration
	SlideAfter float64
	// Lease bounds one mutating request's hold on the session.
	Lease time.Duration
}

func sessionKey(id string) string     { return "session:{" + id + "}" }
func sessionLock(id string) string    { return "lock:session:{" + id + "}" }
func userSessions(user string) string { return "user-sessions:{" + user + "}" }

// Load returns the session and its version (0: new), sliding its TTL when
// enough of its life has passed.
func (s *Store) Load(ctx context.Context, id string) (Session, int64, error) {
	var sess Session
	data, version, err := s.cw.GetVersioned(ctx, sessionKey(id))
	if errors.Is(err, instrument.ErrNotFound) {
		return sess, 0, nil
	}
	if err != nil {
		return sess, 0, err
	}
	if err := json.Unmarshal(data, &sess); err != nil {
		return sess, 0, fmt.Errorf("session %s: %w", id, err)
	}
	_, err = s.cw.SlideTTL(ctx, sessionKey(id), s.Life, s.SlideAfter)
	return sess, version, err
}

// Update applies fn to the session under its lease and writes the result as
// the next version by compare-and-set.
func (s *Store) Update(ctx context.Context, id string, fn func(*Session)) (Session, error) {
	// Requests of one session queue for its lease with full-jitter backoff
	// capped at 50ms, for as long as the request's own context allows.
	lock, err := s.cw.Lock(ctx, sessionLock(id), instrument.LockOptions{TTL: s.Lease, Renew: true,
		Backoff: instrument.Backoff{Max: 50 * time.Millisecond, Retries: 1000}})
	if err != nil {
		return Session{}, err
	}
	defer func() { _ = lock.Release(context.WithoutCancel(ctx)) }()
	work := lock.Context() // cancelled if the lease is lost mid-request
	sess, version, err := s.Load(work, id)
	if err != nil {
		return sess, err
	}
	fn(&sess)
	data, err := json.Marshal(sess)
	if err != nil {
		return sess, err
	}
	res, err := s.cw.SetVersioned(work, sessionKey(id), data, version+1, s.Life)
	if err != nil {
		return sess, err
	}
	if res != instrument.NewerVersion {
		return sess, ErrConflict
	}
	if sess.UserID != "" {
		err = s.rdb.SAdd(work, userSessions(sess.UserID), id).Err()
	}
	return sess, err
}

// LogoutUser removes every session of user with UNLINK (freed off Redis's
// main thread) and returns how many there were.
func (s *Store) LogoutUser(ctx context.Context, user string) (int64, error) {
	ids, err := s.rdb.SMembers(ctx, userSessions(user)).Result()
	if err != nil {
		return 0, err
	}
	keys := []string{userSessions(user)}
	for _, id := range ids {
		keys = append(keys, sessionKey(id))
	}
	n, err := s.cw.Invalidate(ctx, keys...)
	if n > 0 {
		n-- // the index itself
	}
	return n, err
}

type ctxKey struct{}

// Middleware gives every request a session ID cookie and puts the ID in the
// request's context.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if c, err := r.Cookie("sid"); err == nil && len(c.Value) == 32 {
			id = c.Value
		} else {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			id = hex.EncodeToString(b)
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: id, HttpOnly: true, Path: "/"})
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
	})
}

// SessionID returns the ID the Middleware put in ctx.
func SessionID(ctx context.Context) string { id, _ := ctx.Value(ctxKey{}).(string); return id }

// Handler serves the example's routes: GET / shows the session, POST /cart
// adds ?item=, POST /login?user= binds it to a user, POST /logout-all?user=
// ends every session of that user.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.Update(r.Context(), SessionID(r.Context()), func(s *Session) { s.Views++ })
		reply(w, sess, err)
	})
	mux.HandleFunc("POST /cart", func(w http.ResponseWriter, r *http.Request) {
		item := r.URL.Query().Get("item")
		sess, err := s.Update(r.Context(), SessionID(r.Context()), func(s *Session) { s.Cart = append(s.Cart, item) })
		reply(w, sess, err)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		sess, err := s.Update(r.Context(), SessionID(r.Context()), func(s *Session) { s.UserID = user })
		reply(w, sess, err)
	})
	mux.HandleFunc("POST /logout-all", func(w http.ResponseWriter, r *http.Request) {
		n, err := s.LogoutUser(r.Context(), r.URL.Query().Get("user"))
		reply(w, map[string]int64{"sessions_ended": n}, err)
	})
	return Middleware(mux)
}

// newStore wires a hooked go-redis client, the instrumented client and a
// Store with the example's defaults onto reg.
func newStore(rdb *redis.Client, reg prometheus.Registerer) (*Store, error) {
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: "session"})
	if err != nil {
		return nil, err
	}
	rdb.AddHook(h)
	cw, err := instrument.New(rdb, instrument.Options{Registerer: reg, Name: "session"})
	if err != nil {
		return nil, err
	}
	return &Store{cw: cw, rdb: rdb, Life: 30 * time.Minute, SlideAfter: 0.5, Lease: 2 * time.Second}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address")
	url := flag.String("redis", "redis://127.0.0.1:6379", serve.URLHelp)
	flag.Parse()
	reg := prometheus.NewRegistry()
	store, err := newStore(serve.Redis("session", *url), reg)
	if err != nil {
		serve.Exit("session", 1, err)
	}
	serve.HTTP("session", *listen, reg, store.Handler())
}
