package local

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"unsafe"
)

// waitExited blocks until child pid has exited but leaves it unreaped
// (waitid with WNOWAIT): until it is reaped its pid cannot be reused, so the
// caller can stop signalling it before a stranger could get that pid.
func waitExited(pid int) error {
	const pPID = 1 // P_PID from <sys/wait.h>; package syscall lacks it
	// siginfo_t is 128 bytes on Linux; its contents are not needed.
	var info [16]uint64
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return os.NewSyscallError("waitid", errno)
		}
	}
}

// Bounds of the log excerpt that explains a failure.
const (
	tailBytes = 4096
	tailLines = 3
)

// logTail returns the last few non-empty lines of the file at path, trimmed
// and joined by newlines, or "" if there are none or it cannot be read.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-tailBytes, 0)
	buf := make([]byte, fi.Size()-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return ""
	}
	lines := bytes.Split(buf[:n], []byte("\n"))
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first one is cut
	}
	var tail []string
	for i := len(lines) - 1; i >= 0 && len(tail) < tailLines; i-- {
		if s := strings.TrimSpace(string(lines[i])); s != "" {
			tail = append(tail, s)
		}
	}
	slices.Reverse(tail) // collected backwards
	return strings.Join(tail, "\n")
}
