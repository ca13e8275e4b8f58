package dashboard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStalledClient: a client that sends its request and then never reads
// fills the socket buffers. Its stream blocks in a write, misses the write
// deadline and is dropped, while Publish goes on returning and a healthy
// stream beside it keeps up. No assertion on time: the proof that Publish
// waits for no reader is 100 publishes returning during one write of the
// stalled stream that has not returned.
func TestStalledClient(t *testing.T) {
	ended := make(chan error, 4)
	// The first stream to write is the stalled one (it connects first):
	// inWrite counts its writes begun and not returned.
	var mu sync.Mutex
	var stalled *stream
	var inWrite, returned int
	onWrite := func(s *stream, begin bool) {
		mu.Lock()
		defer mu.Unlock()
		if stalled == nil {
			stalled = s
		}
		if s != stalled {
			return
		}
		if begin {
			inWrite++
		} else {
			inWrite--
			returned++
		}
	}
	blocked := func() (bool, int) {
		mu.Lock()
		defer mu.Unlock()
		return inWrite > 0, returned
	}
	h, srv := newServerHooked(t, Options{Interval: time.Millisecond, WriteTimeout: 5 * time.Second},
		onWrite, func(err error) { ended <- err })
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

	// Publish until 100 publishes return during one write of the stalled
	// stream that has not returned: once the socket buffers are full, its
	// write blocks until the deadline, and Publish must not wait for it.
	proved := false
	for !proved {
		select {
		case err := <-ended:
			t.Fatalf("the stalled stream ended (%v) before 100 publishes returned during one of its writes", err)
		default:
		}
		h.Publish(Update{Snapshot: big, Delta: big})
		if in, before := blocked(); in {
			for i := 0; i < 100; i++ {
				h.Publish(Update{Snapshot: big, Delta: big})
			}
			in, after := blocked()
			proved = in && after == before
		}
	}
	// Publishing on, the buffers fill and the write deadline drops it.
	var dropped error
	for deadline := time.Now().Add(guard); dropped == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream was never dropped")
		}
		h.Publish(Update{Snapshot: big, Delta: big})
		select {
		case dropped = <-ended:
		default:
		}
	}
	if !errors.Is(dropped, os.ErrDeadlineExceeded) {
		t.Fatalf("the stalled stream ended with %v, want the write deadline", dropped)
	}

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
