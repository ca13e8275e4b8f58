package client

import (
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// Option configures Dial.
type Option func(*options)

type options struct {
	log                    *slog.Logger
	dialOpts               []grpc.DialOption
	minBackoff, maxBackoff time.Duration
	dtype                  pserverpb.DType
	grpcOnly               bool
	noSharedMemory         bool // tests: local direct connections without a shared region
	creds                  *tlsid.Creds
}

// WithCreds makes the direct connections to the shards mutual TLS with
// creds (nil: plaintext); gRPC's credentials are WithDialOptions'.
func WithCreds(creds *tlsid.Creds) Option { return func(o *options) { o.creds = creds } }

// WithGRPCOnly makes gradient pushes and parameter pulls go over gRPC
// like every other call, instead of over direct connections (package
// direct: the same messages, with a fraction of gRPC's copies).
func WithGRPCOnly() Option { return func(o *options) { o.grpcOnly = true } }

// WithTransportDType makes dense gradients travel to the shards, and
// parameters back, as dtype (default float32). bfloat16 halves the bytes
// of a step; the shards keep and update float32, and the model's initial
// values (PushModel, re-initializations) always travel exactly.
func WithTransportDType(dtype pserverpb.DType) Option { return func(o *options) { o.dtype = dtype } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithDialOptions appends gRPC dial options after the defaults (so they
// win), e.g. for tests or TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithBackoff sets the retry backoff: the first wait and its cap (default
// 50ms and 1s). Waits double and are jittered by ±20%.
func WithBackoff(initial, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = initial, max }
}
