// Package collective is elastic ring allreduce over TCP (over Unix sockets
// between members on one host, see local.go): the members of a
// ring (workers of the AllReduce strategy) sum their gradients among
// themselves, and when membership changes they form a new ring with a new
// version. Who is in the ring, and in which order, is decided elsewhere (the
// master's rendezvous hands each worker a member list and a version); this
// package only forms rings and runs collectives on them. It depends on the
// standard library and package tlsid only.
//
// # Use
//
//	l, err := collective.Listen(":7000", logger) // once per process
//	// or collective.ListenTLS(":7000", logger, creds): every link mutual
//	// TLS between the job's workers (tls.go); a link on the local Unix
//	// socket, once both workers are proven and the hello answered, goes
//	// on in plaintext on the socket (tlsid.SwitchRaw): the kernel keeps
//	// its bytes from other users, and AES-GCM cut its throughput 3-4x
//	...
//	ring, err := l.Form(ctx, collective.Config{
//		Rank: 1, Peers: []string{"w0:7000", "w1:7000", "w2:7000"},
//		Version: 7, Timeout: 30 * time.Second, Logger: logger,
//	})
//	err = ring.AllReduce(ctx, grads)    // grads is now the sum over members
//	err = ring.Broadcast(ctx, 0, params) // params is now rank 0's
//	ring.Close()
//
// On any error the Ring is broken (ErrBroken): close it and form the next
// ring, with a new version, from the new member list.
//
// # Forming a ring
//
// Member r dials member r+1 and accepts member r-1 (indices mod the world
// size), so each member holds two connections: it writes to the next and
// reads from the previous. A world of one opens none and its collectives
// are no-ops. The dialer's handshake carries a magic, the protocol, the
// version, its rank, the rank it means to reach, the world size and a hash
// of the member list; the Listener answers OK only when all match the Form
// waiting there, and otherwise tells the dialer to retry (that version is
// not forming there yet: the neighbour is late) or refuses it for good
// (ErrRefused: an older version — a late connection from a previous ring —,
// a wrong rank, world size or member list, a duplicate). A refusal is
// answered on that connection only: the correct Form waiting at the same
// Listener is not disturbed. Dialing retries with a short backoff while the
// neighbour's listener is not up yet. Form gives up when ctx ends or after
// Timeout. A Listener forms one ring at a time and its versions never
// decrease; a newer Form supersedes a waiting older one.
//
// # AllReduce
//
// AllReduce is the bandwidth-optimal ring algorithm: the buffer is cut into
// world-size chunks; a reduce-scatter (world-1 steps) leaves each member
// with the complete sum of one chunk, and an all-gather (world-1 steps)
// passes the sums around. Each member sends and receives 2(world-1)/world
// of the buffer, whatever the world size. With two members this is exactly
// "each sends one half and receives the other, adds, and they exchange the
// sums": no special path is needed (BenchmarkAllReduce shows 2 members are
// not slower than 3).
//
// Chunks are cut again into segments (Config.SegmentBytes, 1 MiB by
// default) and the two phases are one pipeline: a member forwards segment k
// of a step as soon as it has received (and added) segment k of the step
// before, while the next segments are still in flight. Every collective
// runs two goroutines per member, one writing to the next member and one
// reading from the previous, so both directions of the ring flow at once;
// they wait on each other only where a segment's data depends on it.
//
// The wire carries the caller's float32 values as raw little-endian bytes:
// on little-endian hosts, segments are written from and read into the
// caller's slice itself (reduce-scatter receives land in a one-segment
// scratch buffer and are added). Each collective starts with a 24-byte
// header on every link (operation, root, sequence number, element count),
// so members that call different collectives or pass different lengths fail
// with "out of step" instead of exchanging garbage.
//
// # Identical results
//
// Every member ends with the same bits. Chunk c's sum is computed once, by
// the members in ring order starting at member c:
// ((x[c] + x[c+1]) + x[c+2]) + ... + x[c-1] (float32 additions, member
// indices mod the world size); the all-gather then copies those bits to
// everyone. Float addition is commutative bit for bit (only associativity
// fails), so no member can end with a differently rounded sum. The order
// depends on the chunk, hence on the world size and the element's index:
// the same inputs give the same result on every member of a ring, and may
// differ in the last bits from a ring of another size.
//
// # Failures and timeouts
//
// Every read and write of a segment (and every header) must make progress
// within Config.Timeout, enforced with per-operation deadlines on the
// connection; waiting for a neighbour is bounded by the neighbour's own
// deadlines. A dead member (connection reset or EOF) fails its neighbours at
// once; a frozen one (SIGSTOP: connection open, nothing flows) fails them
// within about Timeout. The member that fails first closes both its
// connections, so the failure travels around the ring and every member sees
// an error within about Timeout (a couple of Timeouts at worst). Timeout
// also bounds how long a member waits for the others to arrive at the same
// collective, so it must exceed the members' step-time skew. Ending ctx
// closes the ring's connections and fails the collective promptly with
// ctx's cause.
package collective
