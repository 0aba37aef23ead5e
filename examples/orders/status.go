package main

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

// The status page: a small HTML page and script (embedded, no external
// assets) that polls /status.json, the broker's Status as it is, every
// second.
//
//go:embed status
var statusFiles embed.FS

// statusHandler serves the page and its JSON. Only requests addressed to a
// loopback name are answered, so a web page elsewhere cannot read the
// status through a DNS name rebound to 127.0.0.1.
func statusHandler(b *runtime.Broker) http.Handler {
	files, _ := fs.Sub(statusFiles, "status")
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

// listenStatus listens on addr, which must be a loopback address
// ("localhost:0" and "127.0.0.1:8080" are; ":8080" is not).
func listenStatus(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-status %s: want HOST:PORT on loopback, for example 127.0.0.1:8080", addr)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("-status %s: the status page serves on a loopback address only (127.0.0.1 or ::1)", addr)
	}
	return net.Listen("tcp", net.JoinHostPort(host, port))
}

// serveStatus serves the status page on l until ctx ends, then closes it.
func serveStatus(ctx context.Context, l net.Listener, b *runtime.Broker) (done <-chan struct{}) {
	srv := &http.Server{Handler: statusHandler(b), ReadHeaderTimeout: 5 * time.Second}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ch
}
