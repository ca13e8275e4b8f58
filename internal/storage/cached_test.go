package storage

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// memReader is a Reader over bytes that counts its reads and fails the
// next fail of them.
type memReader struct {
	b     []byte
	reads atomic.Int64
	fail  atomic.Int64
}

func (m *memReader) Size() int64  { return int64(len(m.b)) }
func (m *memReader) Name() string { return "mem" }
func (m *memReader) Close() error { return nil }
func (m *memReader) ReadAt(p []byte, off int64) (int, error) {
	m.reads.Add(1)
	if m.fail.Add(-1) >= 0 {
		return 0, errors.New("connection reset")
	}
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Reads through the cache return the object's bytes, at any offset and
// length, from concurrent readers; each block is fetched once while it
// stays cached, and a failed fetch is not kept.
func TestCached(t *testing.T) {
	data := make([]byte, 10_000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	m := &memReader{b: data}
	c := Cached(m, 1000, 100)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 200 {
				off := rng.Int64N(int64(len(data)))
				buf := make([]byte, rng.IntN(2500))
				n, err := c.ReadAt(buf, off)
				want := min(len(buf), len(data)-int(off))
				if n != want || !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
					t.Errorf("ReadAt(%d bytes, %d) = %d, %v: wrong bytes", len(buf), off, n, err)
					return
				}
				if (err == io.EOF) != (want < len(buf)) || err != nil && err != io.EOF {
					t.Errorf("ReadAt(%d bytes, %d): err %v", len(buf), off, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if r := m.reads.Load(); r != 10 {
		t.Errorf("%d fetches for 10 blocks", r)
	}
	small := &memReader{b: data, fail: atomic.Int64{}}
	small.fail.Store(1)
	c = Cached(small, 1000, 2)
	if _, err := c.ReadAt(make([]byte, 10), 0); err == nil {
		t.Fatal("a failed fetch: no error")
	}
	if n, err := c.ReadAt(make([]byte, 10), 0); n != 10 || err != nil {
		t.Fatalf("after a failed fetch: %d, %v", n, err)
	}
	for _, off := range []int64{1000, 2000, 3000, 0} { // 0 was evicted
		c.ReadAt(make([]byte, 1), off)
	}
	if r := small.reads.Load(); r != 6 {
		t.Errorf("%d fetches, want 6 (1 failed, 4 blocks, 1 evicted and fetched again)", r)
	}
	if _, err := c.ReadAt(make([]byte, 1), -1); err == nil {
		t.Error("negative offset: no error")
	}
}
