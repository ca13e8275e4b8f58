package direct

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// On a local (Unix socket) connection the client may lend the server a
// shared memory region (a sealed memfd, passed once, right after the
// hello): a frame whose flags say flagShared has its contents in the
// region, back to back from offset 0, instead of on the socket. A request
// and its answer take turns in it, since a connection carries one call at
// a time: the server is done with a request's contents once its handler
// returns, the client with an answer's once it releases it. Neither side
// then pays the kernel's two copies of every byte or the socket's
// wake-ups; a frame whose contents do not fit travels as before.

// maxRegion bounds a region: each idle connection holds one.
const maxRegion = 128 << 20

// regionGranule rounds a region's size up.
const regionGranule = 64 << 10

// flagShared: the frame's contents are in the connection's region.
const flagShared = 1

// regionSize is the size of a region for contents of want bytes: room to
// grow, rounded up, at most maxRegion (0 for none).
func regionSize(want int) int {
	if want <= 0 {
		return 0
	}
	n := want + want/4
	n = (n + regionGranule - 1) / regionGranule * regionGranule
	return min(n, maxRegion)
}

// regionFits says whether a connection's region (of size bytes) is worth
// keeping for contents of up to want bytes: a TCP connection has none to
// outgrow, and without shared memory there is nothing to grow into.
func regionFits(local, noShared bool, size, want int) bool {
	return !local || noShared || size >= min(want, maxRegion)
}

// createRegion makes a region of size bytes: an anonymous memfd, sealed
// against shrinking (so that the server's mapping can never fault), and
// mapped here. The caller passes fd on and closes it.
func createRegion(size int) (mem []byte, fd int, err error) {
	fd, err = unix.MemfdCreate("elasticdl-direct", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("direct: memfd_create: %w", err)
	}
	fail := func(what string, err error) ([]byte, int, error) {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("direct: region of %d bytes: %s: %w", size, what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return mem, fd, nil
}

// mapRegion maps a region the peer passed, after checking that it cannot
// shrink under the mapping and holds size bytes.
func mapRegion(fd, size int) ([]byte, error) {
	if size <= 0 || size > maxRegion {
		return nil, fmt.Errorf("direct: region of %d bytes (at most %d)", size, maxRegion)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("direct: region's seals: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errors.New("direct: region not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("direct: region's size: %w", err)
	}
	if st.Size < int64(size) {
		return nil, fmt.Errorf("direct: region of %d bytes, %d announced", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("direct: mmap region: %w", err)
	}
	return mem, nil
}

func unmapRegion(mem []byte) {
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}

// offerRegion is the client's side of the exchange: the region's size
// (u64; 0 for none) with its fd attached, answered by one byte, 1 when
// the server mapped it. fd < 0 offers none.
func offerRegion(conn *net.UnixConn, fd, size int) (accepted bool, err error) {
	var b [8]byte
	var oob []byte
	if fd >= 0 {
		binary.LittleEndian.PutUint64(b[:], uint64(size))
		oob = unix.UnixRights(fd)
	}
	if _, _, err := conn.WriteMsgUnix(b[:], oob, nil); err != nil {
		return false, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return false, unexpected(err)
	}
	return ack[0] == 1, nil
}

// acceptRegion is the server's side: it reads the offer and maps the
// region. A region it cannot use is refused (nil, nil): the connection
// goes on without one. An error is the connection's.
func acceptRegion(conn *net.UnixConn) (mem []byte, refused error, err error) {
	_ = conn.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer conn.SetReadDeadline(time.Time{})
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, nil, err
	}
	// The fds come with the first byte; the rest may lag.
	if _, err := io.ReadFull(conn, b[n:]); err != nil {
		return nil, nil, unexpected(err)
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for i := range msgs {
			if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	size := binary.LittleEndian.Uint64(b[:])
	switch {
	case size == 0 && len(fds) == 0:
		// No region offered.
	case flags&unix.MSG_CTRUNC != 0 || len(fds) != 1:
		refused = fmt.Errorf("direct: a region offer with %d fds", len(fds))
	case size > maxRegion:
		refused = fmt.Errorf("direct: region of %d bytes (at most %d)", size, maxRegion)
	default:
		mem, refused = mapRegion(fds[0], int(size))
	}
	ack := []byte{0}
	if mem != nil {
		ack[0] = 1
	}
	if _, err := conn.Write(ack); err != nil {
		unmapRegion(mem)
		return nil, refused, err
	}
	return mem, refused, nil
}
