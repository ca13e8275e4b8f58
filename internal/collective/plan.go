package collective

// A plan is what one member sends and receives in one collective: the
// ordered segments it writes to the next member and the ordered segments it
// reads from the previous one. Plans are pure functions of (rank, world size,
// element count, segment size) — no I/O — so the schedule can be checked
// exhaustively without sockets (plan_test.go runs whole rings of plans in
// memory).
//
// The byte stream on a link is the concatenation of the sender's segments in
// order; the segment boundaries are local (they set the pipelining grain and
// the dependencies), so two members with different segment sizes still agree
// on the stream.
type plan struct {
	sends []xfer // written in order to the next member
	recvs []xfer // read in order from the previous member
	// maxReduce is the longest reducing receive, in elements (the size of
	// the scratch buffer a received segment lands in before it is added).
	maxReduce int
	// maxXfer is the longest transfer in either direction, in elements.
	maxXfer int
}

// xfer is one segment moved on a link: elements [lo, hi) of the buffer.
type xfer struct {
	lo, hi int
	// after is the index of the transfer in the other direction (a receive
	// for a send, a send for a receive) that must have completed before this
	// one starts; -1 when none. A send waits for the receive that produced
	// its data; an overwriting receive waits for the send that last read the
	// region it overwrites.
	after int
	// reduce (receives only): add the received values into the buffer
	// instead of overwriting it.
	reduce bool
}

// span returns the bounds of part i when count elements are cut into parts
// contiguous parts of near-equal length, the first count%parts of them one
// element longer than the rest.
func span(count, parts, i int) (lo, hi int) {
	base, rem := count/parts, count%parts
	lo = i*base + min(i, rem)
	hi = lo + base
	if i < rem {
		hi++
	}
	return lo, hi
}

// mod is the non-negative remainder of a by n.
func mod(a, n int) int { return ((a % n) + n) % n }

// segmentsFor is how many segments a part of up to longest elements is cut
// into so that none is longer than segElems; at least one.
func segmentsFor(longest, segElems int) int {
	return max(1, (longest+segElems-1)/segElems)
}

// allReducePlan is the ring allreduce of count elements for member rank of
// size: reduce-scatter then all-gather, 2(size-1) steps, both cut into the
// same segments so the two phases pipeline into each other.
//
// The buffer is cut into size chunks (span). At step t (0 <= t < 2(size-1))
// the member sends chunk (rank-t) mod size and receives chunk
// (rank-t-1) mod size. In the first size-1 steps (reduce-scatter) it adds
// what it receives into its own values; after them it holds the complete sum
// of chunk (rank+1) mod size. In the last size-1 steps (all-gather) it
// overwrites with what it receives, which is always a complete sum. A send at
// step t > 0 forwards exactly what was received at step t-1, segment by
// segment, so segment k of step t leaves as soon as segment k of step t-1 has
// arrived (and, in reduce-scatter, been added).
//
// Chunk c is therefore summed along the ring in one fixed order, starting
// with member c's values: ((x[c] + x[c+1]) + x[c+2]) + ... + x[c+size-1]
// (member indices mod size), once, by the members in turn; the all-gather
// then copies those bits to everyone. Every member ends with the same bits.
func allReducePlan(rank, size, count, segElems int) plan {
	nseg := segmentsFor((count+size-1)/size, segElems)
	steps := 2 * (size - 1)
	p := plan{
		sends: make([]xfer, 0, steps*nseg),
		recvs: make([]xfer, 0, steps*nseg),
	}
	for t := range steps {
		sendLo, sendHi := span(count, size, mod(rank-t, size))
		recvLo, recvHi := span(count, size, mod(rank-t-1, size))
		reducing := t < size-1
		for k := range nseg {
			lo, hi := span(sendHi-sendLo, nseg, k)
			send := xfer{lo: sendLo + lo, hi: sendLo + hi, after: -1}
			if t > 0 {
				send.after = (t-1)*nseg + k
			}
			lo, hi = span(recvHi-recvLo, nseg, k)
			recv := xfer{lo: recvLo + lo, hi: recvLo + hi, after: -1, reduce: reducing}
			if !reducing {
				// The region was last read by the reduce-scatter send of the
				// same chunk, size-1 steps earlier.
				recv.after = (t-size+1)*nseg + k
			}
			p.send(send)
			p.recv(recv)
		}
	}
	return p
}

// broadcastPlan copies root's count elements to every member of size along
// the ring root, root+1, ...: each member but the root receives segment by
// segment, and each member but the last forwards every segment as soon as it
// has it, so the copy is pipelined over the chain.
func broadcastPlan(rank, size, root, count, segElems int) plan {
	pos := mod(rank-root, size) // distance from the root along the ring
	nseg := segmentsFor(count, segElems)
	var p plan
	for k := range nseg {
		lo, hi := span(count, nseg, k)
		if pos > 0 {
			p.recv(xfer{lo: lo, hi: hi, after: -1})
		}
		if pos < size-1 {
			send := xfer{lo: lo, hi: hi, after: -1}
			if pos > 0 {
				send.after = k // forward segment k once it has arrived
			}
			p.send(send)
		}
	}
	return p
}

// send appends a send to the plan.
func (p *plan) send(x xfer) {
	p.sends = append(p.sends, x)
	p.maxXfer = max(p.maxXfer, x.hi-x.lo)
}

// recv appends a receive to the plan.
func (p *plan) recv(x xfer) {
	p.recvs = append(p.recvs, x)
	p.maxXfer = max(p.maxXfer, x.hi-x.lo)
	if x.reduce {
		p.maxReduce = max(p.maxReduce, x.hi-x.lo)
	}
}
