// Command websvc is the online service of the e2e autoscaler tests: a small
// HTTP server, run in the pods of a Deployment at a higher priority than
// training, whose replica count the tests drive up and down. It listens on
// $POD_IP:$PORT (the downward API gives the pod's IP; process nodes give
// each pod its own loopback address), answers every request with its pod's
// name, and shuts down gracefully on SIGTERM, as a web server pod should.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("websvc", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	host, port := os.Getenv("POD_IP"), os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	name := os.Getenv("POD_NAME")
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s\n", name)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Info("serving", "addr", ln.Addr().String(), "pod", name)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
