package dashboard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStalledClient: a client that sends its request and then never reads
// fills the socket buffers. Its stream blocks in a write, misses the write
// deadline and is dropped, while Publish goes on returning at once and a
// healthy stream beside it keeps up.
func TestStalledClient(t *testing.T) {
	ended := make(chan error, 4)
	h, srv := newServer(t, Options{Interval: time.Millisecond, WriteTimeout: 3 * time.Second},
		func(err error) { ended <- err })
	big := raw(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 64<<10)))
	h.Publish(Update{Snapshot: big, Delta: big})

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /api/stream HTTP/1.1\r\nHost: dashboard\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the status line only, to know the stream was admitted; from here
	// on nothing is read.
	status, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("stalled stream: %q %v", status, err)
	}
	healthy := openStream(t, srv.URL, "")

	sawDone := make(chan struct{})
	go func() {
		for ev := range healthy.events {
			if strings.Contains(ev.Data, `"done":true`) {
				close(sawDone)
			}
		}
	}()

	// Publish until the stalled stream is dropped: with its writes blocked
	// for the whole deadline, that is many publishes.
	var n int
	var slowest time.Duration
	var dropped error
	for dropped == nil {
		start := time.Now()
		h.Publish(Update{Snapshot: big, Delta: big})
		slowest = max(slowest, time.Since(start))
		n++
		select {
		case dropped = <-ended:
		default:
		}
	}
	if n < 1000 {
		t.Fatalf("only %d publishes while the stalled stream was connected", n)
	}
	if !errors.Is(dropped, os.ErrDeadlineExceeded) {
		t.Fatalf("the stalled stream ended with %v, want the write deadline", dropped)
	}
	if slowest > time.Second { // a generous guard: Publish waits for no reader
		t.Fatalf("a Publish took %v", slowest)
	}
	t.Logf("%d publishes of %d KiB while stalled; slowest %v", n, len(big)>>10, slowest)

	// The server closed the stalled connection: reading drains what the
	// buffers hold, then ends (EOF or reset), well before the guard.
	_ = conn.SetReadDeadline(time.Now().Add(guard))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the stalled connection was not closed")
	}

	// The healthy stream followed all along.
	h.Publish(Update{Snapshot: raw(`{"done":true}`), Delta: raw(`{"done":true}`)})
	select {
	case <-sawDone:
	case <-time.After(guard):
		t.Fatal("the healthy stream did not get the last delta")
	}
	if h.Streams() != 1 {
		t.Fatalf("%d streams open, want the healthy one", h.Streams())
	}
}
