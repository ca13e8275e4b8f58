// Package agent serves a cluster.Backend over gRPC (a Unix socket) from the
// process that owns a job's instances, and implements cluster.Backend on
// top of it for the job's master in another process. Locally, `elasticdl
// train` owns the worker and PS processes and runs the master as a child:
// when the master dies, the instances live on, and the next master adopts
// them — as a restarted master pod adopts the pods that still run.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/cluster"
	"elasticdl/internal/cluster/local"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/proto/agentpb"
)

// Server serves one backend to one master at a time. It keeps every
// instance's latest event, so that a master that starts after another
// died learns the state of every instance (Watch's list), whatever the
// dead master had read of the stream.
type Server struct {
	agentpb.UnimplementedAgentServer

	backend cluster.Backend
	log     *slog.Logger
	gs      *grpc.Server

	mu     sync.Mutex
	latest map[instanceKey]cluster.Event
	watch  *cluster.EventQueue // the current master's stream; nil when none
	pumped chan struct{}       // closed when the backend's events end
}

type instanceKey struct {
	role cluster.Role
	id   int
}

// Serve serves backend on lis until Stop. It owns the backend's event
// stream from now on.
func Serve(lis net.Listener, backend cluster.Backend, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{backend: backend, log: logger, latest: map[instanceKey]cluster.Event{}, pumped: make(chan struct{})}
	s.gs = grpc.NewServer(append(rpc.ServerOptions(), grpc.Creds(tlsid.LocalUserOnly()))...)
	agentpb.RegisterAgentServer(s.gs, s)
	go s.pump()
	go func() {
		if err := s.gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			logger.Error("agent server", "err", err)
		}
	}()
	return s
}

// Shutdown ends the server (not the backend: the caller closes it).
func (s *Server) Shutdown() { s.gs.Stop() }

func (s *Server) pump() {
	defer close(s.pumped)
	for ev := range s.backend.Events() {
		s.mu.Lock()
		s.latest[instanceKey{ev.Role, ev.ID}] = ev
		if s.watch != nil {
			s.watch.Push(ev)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	if s.watch != nil {
		s.watch.Close()
		s.watch = nil
	}
	s.mu.Unlock()
}

// Launch implements agentpb.AgentServer.
func (s *Server) Launch(ctx context.Context, req *agentpb.LaunchRequest) (*agentpb.LaunchResponse, error) {
	spec := cluster.InstanceSpec{Role: cluster.Role(req.Role), ID: int(req.Id), Index: int(req.Index), Args: req.Args, Env: req.Env, Command: req.Command}
	if err := s.backend.Launch(ctx, spec); err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &agentpb.LaunchResponse{}, nil
}

// Stop implements agentpb.AgentServer.
func (s *Server) Stop(ctx context.Context, req *agentpb.StopRequest) (*agentpb.StopResponse, error) {
	if err := s.backend.Stop(ctx, cluster.Role(req.Role), int(req.Id)); err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &agentpb.StopResponse{}, nil
}

// PSAddress implements agentpb.AgentServer.
func (s *Server) PSAddress(_ context.Context, req *agentpb.PSAddressRequest) (*agentpb.PSAddressResponse, error) {
	ep, err := s.backend.PSAddress(int(req.Index))
	if err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &agentpb.PSAddressResponse{Listen: ep.Listen, Dial: ep.Dial}, nil
}

// Close implements agentpb.AgentServer.
func (s *Server) Close(ctx context.Context, _ *agentpb.CloseRequest) (*agentpb.CloseResponse, error) {
	if err := s.backend.Close(ctx); err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &agentpb.CloseResponse{}, nil
}

// Watch implements agentpb.AgentServer.
func (s *Server) Watch(_ *agentpb.WatchRequest, stream agentpb.Agent_WatchServer) error {
	s.mu.Lock()
	list := make([]cluster.Event, 0, len(s.latest))
	for _, ev := range s.latest {
		list = append(list, ev)
	}
	if s.watch != nil {
		s.watch.Close() // the previous master's stream ends
	}
	q := cluster.NewEventQueue()
	select {
	case <-s.pumped:
		q.Close() // no more events will come
	default:
		s.watch = q
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.watch == q {
			s.watch = nil
		}
		s.mu.Unlock()
		q.Close()
		for range q.Out() { // let its goroutine end
		}
	}()
	slices.SortFunc(list, func(a, b cluster.Event) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID, b.ID))
	})
	for _, ev := range list {
		if err := stream.Send(toProto(ev)); err != nil {
			return err
		}
	}
	if err := stream.Send(&agentpb.InstanceEvent{EndOfList: true}); err != nil {
		return err
	}
	for {
		select {
		case ev, ok := <-q.Out():
			if !ok {
				return nil
			}
			if err := stream.Send(toProto(ev)); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func toProto(ev cluster.Event) *agentpb.InstanceEvent {
	return &agentpb.InstanceEvent{Role: string(ev.Role), Id: int32(ev.ID), Index: int32(ev.Index), Phase: int32(ev.Phase),
		ExitCode: int32(ev.ExitCode), Reason: int32(ev.Reason), Message: ev.Message, Requested: ev.Requested}
}

func fromProto(p *agentpb.InstanceEvent) cluster.Event {
	return cluster.Event{Role: cluster.Role(p.Role), ID: int(p.Id), Index: int(p.Index), Phase: cluster.Phase(p.Phase),
		ExitCode: int(p.ExitCode), Reason: cluster.ExitReason(p.Reason), Message: p.Message, Requested: p.Requested}
}

// Client is the master's side: a cluster.Backend whose instances the
// agent's process owns.
type Client struct {
	conn     *grpc.ClientConn
	agent    agentpb.AgentClient
	events   *cluster.EventQueue
	existing []cluster.Event
	cancel   context.CancelFunc
	done     chan struct{}
	log      *slog.Logger
	tlsDir   atomic.Pointer[string] // set before the first Launch; read by follow too
}

var _ cluster.Backend = (*Client)(nil)

// Dial connects to the agent at addr (a Unix socket path; "@name" is in the
// abstract namespace) and starts watching: what exists already is
// Existing's, what happens next arrives on Events.
func Dial(ctx context.Context, addr string, logger *slog.Logger) (*Client, error) {
	if logger == nil {
		logger = slog.Default()
	}
	conn, err := grpc.NewClient("unix:"+addr, append(rpc.DialOptions(nil), grpc.WithTransportCredentials(tlsid.LocalUserOnly()))...)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	c := &Client{conn: conn, agent: agentpb.NewAgentClient(conn), events: cluster.NewEventQueue(), done: make(chan struct{}), log: logger}
	wctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	stream, err := c.watch(ctx, wctx)
	if err != nil {
		cancel()
		conn.Close()
		c.events.Close()
		return nil, fmt.Errorf("agent %s: watch: %w", addr, err)
	}
	go c.follow(stream)
	return c, nil
}

// watch opens the stream (on wctx, which outlives Dial) and reads the list
// of existing instances, giving up when ctx ends.
func (c *Client) watch(ctx, wctx context.Context) (agentpb.Agent_WatchClient, error) {
	type result struct {
		stream agentpb.Agent_WatchClient
		err    error
	}
	got := make(chan result, 1)
	go func() {
		stream, err := c.agent.Watch(wctx, &agentpb.WatchRequest{}, grpc.WaitForReady(true))
		for err == nil {
			var p *agentpb.InstanceEvent
			if p, err = stream.Recv(); err == nil {
				if p.EndOfList {
					break
				}
				c.existing = append(c.existing, fromProto(p))
			}
		}
		got <- result{stream, err}
	}()
	select {
	case r := <-got:
		return r.stream, r.err
	case <-ctx.Done():
		c.cancel() // ends the calls above
		<-got
		return nil, context.Cause(ctx)
	}
}

// follow forwards the stream's events until it ends (the agent's process
// is gone, or Close): then Events closes, as a backend's does.
func (c *Client) follow(stream agentpb.Agent_WatchClient) {
	defer close(c.done)
	defer c.events.Close()
	for {
		p, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled {
				c.log.Warn("agent event stream ended", "err", err)
			}
			return
		}
		ev := fromProto(p)
		if ev.Phase == cluster.Exited {
			if err := local.RemoveTLS(c.dir(), ev.Role, ev.ID); err != nil {
				c.log.Warn("removing an exited instance's TLS bundle", "err", err)
			}
		}
		c.events.Push(ev)
	}
}

// Existing returns the instances that existed when the client connected,
// each as its latest event.
func (c *Client) Existing(context.Context) ([]cluster.Event, error) {
	return slices.Clone(c.existing), nil
}

// SetTLSDir names where instances' TLS bundles are written: the agent
// is on this host, and the bundle travels as files, not over its socket.
func (c *Client) SetTLSDir(dir string) { c.tlsDir.Store(&dir) }

// dir is where instances' TLS bundles go ("": none).
func (c *Client) dir() string {
	if d := c.tlsDir.Load(); d != nil {
		return *d
	}
	return ""
}

// Launch implements cluster.Backend.
func (c *Client) Launch(ctx context.Context, spec cluster.InstanceSpec) error {
	spec, err := local.WriteTLS(c.dir(), spec)
	if err != nil {
		return fmt.Errorf("launch %s: %w", spec.Name(), err)
	}
	_, err = c.agent.Launch(ctx, &agentpb.LaunchRequest{Role: string(spec.Role), Id: int32(spec.ID), Index: int32(spec.Index), Args: spec.Args, Env: spec.Env, Command: spec.Command})
	return unwrap(err)
}

// Stop implements cluster.Backend.
func (c *Client) Stop(ctx context.Context, role cluster.Role, id int) error {
	_, err := c.agent.Stop(ctx, &agentpb.StopRequest{Role: string(role), Id: int32(id)})
	return unwrap(err)
}

// PSAddress implements cluster.Backend.
func (c *Client) PSAddress(index int) (cluster.Endpoint, error) {
	r, err := c.agent.PSAddress(context.Background(), &agentpb.PSAddressRequest{Index: int32(index)})
	if err != nil {
		return cluster.Endpoint{}, unwrap(err)
	}
	return cluster.Endpoint{Listen: r.Listen, Dial: r.Dial}, nil
}

// Events implements cluster.Backend.
func (c *Client) Events() <-chan cluster.Event { return c.events.Out() }

// Close stops every instance (through the agent) and the event stream.
func (c *Client) Close(ctx context.Context) error {
	_, err := c.agent.Close(ctx, &agentpb.CloseRequest{})
	c.cancel()
	<-c.done
	c.conn.Close()
	return unwrap(err)
}

// Detach ends the client without stopping anything: the instances stay
// with the agent for the next master.
func (c *Client) Detach() {
	c.cancel()
	<-c.done
	c.conn.Close()
}

// unwrap turns the agent's status back into the backend's error text.
func unwrap(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unknown {
		return errors.New(st.Message())
	}
	return err
}
