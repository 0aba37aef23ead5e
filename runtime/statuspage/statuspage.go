// Package statuspage serves a broker's live status page: a small HTML page,
// script and stylesheet (embedded, nothing fetched from elsewhere) that
// read /status.json, the broker's Status as it is, every second, and show a
// table per subscription with a row per shard (owner, lease, checkpoint,
// lag, read errors, handled, outcomes, in flight).
//
// The page is for the operator's machine: Listen refuses any address but
// loopback, and Handler answers only requests addressed to a loopback name
// (localhost, 127.0.0.1, ::1), so a web page elsewhere cannot read the
// status through a DNS name rebound to 127.0.0.1.
//
//	l, err := statuspage.Listen("127.0.0.1:8080")
//	if err != nil { ... }
//	done := statuspage.Serve(ctx, l, b) // until ctx ends
//
// Handler mounts on a mux of the application's own as well, under a prefix
// with http.StripPrefix (the page's links are relative).
package statuspage

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

//go:embed assets
var assets embed.FS

// ErrNotLoopback is the error of Listen for an address that is not on
// loopback.
var ErrNotLoopback = errors.New("the status page serves on a loopback address only (127.0.0.1, ::1 or localhost)")

// Handler serves the page at / (index.html, status.js, status.css) and
// b.Status() as JSON at /status.json, to requests whose Host is a loopback
// name; any other Host is answered 403 Forbidden.
func Handler(b *runtime.Broker) http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is there at build time
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(files))
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(b.Status())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "the status page answers on a loopback address only", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Listen listens on addr, which must be a loopback HOST:PORT
// ("localhost:0" and "127.0.0.1:8080" are; ":8080" is not). An address
// that is not on loopback is refused with an error wrapping ErrNotLoopback.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("statuspage: %s: want HOST:PORT on loopback, for example 127.0.0.1:8080: %w", addr, ErrNotLoopback)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("statuspage: %s: %w", addr, ErrNotLoopback)
	}
	return net.Listen("tcp", net.JoinHostPort(host, port))
}

// Serve serves Handler(b) on l until ctx ends, then shuts the server down
// (calls under way get a second) and closes l. The channel it returns is
// closed once the server has stopped.
func Serve(ctx context.Context, l net.Listener, b *runtime.Broker) (done <-chan struct{}) {
	srv := &http.Server{Handler: Handler(b), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		_ = srv.Serve(l) // ErrServerClosed after Shutdown
	}()
	go func() {
		defer close(served)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	return served
}
