package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves a hub on a listener until its context ends.
type Server struct {
	Hub *Hub
	// Handler is what is served; nil serves Hub.Handler(). A caller that
	// adds endpoints (queries such as api/events?since=) wraps that.
	Handler         http.Handler
	ShutdownTimeout time.Duration // how long Shutdown waits for requests [5s]
	Logger          *slog.Logger  // the http.Server's errors, at debug [discard]
}

// Serve serves on ln until ctx ends or serving fails. On ctx's end it closes
// the hub (streams send what they have and return: an SSE handler never goes
// idle, so Shutdown alone would wait for it), then shuts down gracefully. It
// closes ln; a supervisor that keeps the port open holds its own descriptor.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	h := s.Handler
	if h == nil {
		h = s.Hub.Handler()
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// No ReadTimeout or WriteTimeout: they would cut streams. Each handler
	// sets its own write deadline; requests are bodiless GETs.
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.Hub.Close()
		return err
	case <-ctx.Done():
	}
	s.Hub.Close()
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
