package collective

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultSegmentBytes is the pipelining grain when Config.SegmentBytes is 0:
// the unit a member reads, reduces and forwards before the next one.
const DefaultSegmentBytes = 1 << 20

var (
	// ErrClosed is returned by operations on a closed Ring or Listener.
	ErrClosed = errors.New("collective: closed")
	// ErrBroken is returned by operations on a Ring after an earlier
	// operation failed: the ring's streams are out of step and it must be
	// closed and formed again (with a new version).
	ErrBroken = errors.New("collective: ring broken by an earlier error")
	// ErrRefused wraps a handshake refusal: the neighbour will never accept
	// this connection (another version, rank, world size or member list).
	ErrRefused = errors.New("collective: connection refused by ring member")
	// ErrSuperseded is returned by a Form that a newer Form on the same
	// Listener replaced.
	ErrSuperseded = errors.New("collective: superseded by a newer ring version")
)

// Config describes one member of one ring. Members' rank order is the order
// of Peers, which every member must be given identically (with the same
// Version): it is checked in the handshake.
type Config struct {
	// Rank is this process's index in Peers.
	Rank int
	// Peers are the host:port addresses of every member's Listener, in
	// ring order; len(Peers) is the world size. Peers[Rank] is not dialed.
	Peers []string
	// Version is the rendezvous version. A member accepts connections of
	// its own version only; a Listener's versions only increase.
	Version int64
	// Timeout bounds every wait for progress: one segment sent or received,
	// a handshake, and Form as a whole. A dead or frozen neighbour becomes
	// an error within about Timeout. It also bounds how long a member waits
	// for the others to arrive at the same collective, so it must exceed
	// the skew between members' calls (their step-time differences).
	Timeout time.Duration
	// SegmentBytes is the pipelining grain (rounded down to whole float32
	// values); 0 means DefaultSegmentBytes. It is local: members may differ.
	SegmentBytes int
	// Logger receives the ring's events; nil discards them.
	Logger *slog.Logger
	// PeerIDs, when set, are the worker IDs of Peers, in the same order.
	// With TLS (ListenTLS), each link's ends prove them: a worker's
	// certificate takes only its own place in the ring.
	PeerIDs []int
}

func (c Config) validate() error {
	n := len(c.Peers)
	switch {
	case n == 0:
		return errors.New("collective: config: no peers")
	case c.Rank < 0 || c.Rank >= n:
		return fmt.Errorf("collective: config: rank %d out of range for %d peers", c.Rank, n)
	case c.Timeout <= 0:
		return fmt.Errorf("collective: config: timeout must be positive, got %v", c.Timeout)
	case c.SegmentBytes < 0 || (c.SegmentBytes > 0 && c.SegmentBytes < 4):
		return fmt.Errorf("collective: config: segment size %d bytes is not 0 or at least 4", c.SegmentBytes)
	case n > 1<<20:
		return fmt.Errorf("collective: config: %d peers is more than %d", n, 1<<20)
	}
	if err := validIDs(c); err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	seen := make(map[string]int, n)
	for i, p := range c.Peers {
		if p == "" {
			return fmt.Errorf("collective: config: peer %d has no address", i)
		}
		if j, dup := seen[p]; dup {
			return fmt.Errorf("collective: config: peers %d and %d share the address %s", j, i, p)
		}
		seen[p] = i
	}
	return nil
}

func (c Config) segElems() int {
	if c.SegmentBytes == 0 {
		return DefaultSegmentBytes / 4
	}
	return c.SegmentBytes / 4
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}
