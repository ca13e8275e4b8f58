package storage

import (
	clist "container/list"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Cached reads r in aligned blocks of blockSize bytes and keeps the most
// recently used maxBlocks of them: many small reads (Parquet pages) become
// few ranged GETs. Concurrent readers of one block wait for one fetch.
func Cached(r Reader, blockSize, maxBlocks int) io.ReaderAt {
	return &cached{r: r, size: r.Size(), block: int64(blockSize), max: max(maxBlocks, 1),
		blocks: map[int64]*clist.Element{}, lru: clist.New()}
}

type cached struct {
	r     Reader
	size  int64
	block int64
	max   int

	mu     sync.Mutex
	blocks map[int64]*clist.Element // block index -> element of lru holding *cachedBlock
	lru    *clist.List              // front: most recently used
}

type cachedBlock struct {
	index int64
	ready chan struct{} // closed once data or err is set
	data  []byte
	err   error
}

func (c *cached) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", c.r.Name(), off)
	}
	n := 0
	for n < len(b) {
		at := off + int64(n)
		if at >= c.size {
			return n, io.EOF
		}
		blk, err := c.get(at / c.block)
		if err != nil {
			return n, err
		}
		n += copy(b[n:], blk.data[at-blk.index*c.block:])
	}
	return n, nil
}

// get returns block i, fetching it once.
func (c *cached) get(i int64) (*cachedBlock, error) {
	c.mu.Lock()
	if e, ok := c.blocks[i]; ok {
		c.lru.MoveToFront(e)
		blk := e.Value.(*cachedBlock)
		c.mu.Unlock()
		<-blk.ready
		return blk, blk.err
	}
	blk := &cachedBlock{index: i, ready: make(chan struct{})}
	c.blocks[i] = c.lru.PushFront(blk)
	for c.lru.Len() > c.max {
		old := c.lru.Remove(c.lru.Back()).(*cachedBlock)
		delete(c.blocks, old.index)
	}
	c.mu.Unlock()

	start := i * c.block
	buf := make([]byte, min(c.block, c.size-start))
	n, err := c.r.ReadAt(buf, start)
	if errors.Is(err, io.EOF) && n == len(buf) {
		err = nil
	}
	blk.data, blk.err = buf[:n], err
	if err == nil && n < len(buf) {
		blk.err = fmt.Errorf("read %s: %d bytes at %d, want %d", c.r.Name(), n, start, len(buf))
	}
	close(blk.ready)
	if blk.err != nil { // not kept: the next read tries again
		c.mu.Lock()
		if e, ok := c.blocks[i]; ok && e.Value == blk {
			c.lru.Remove(e)
			delete(c.blocks, i)
		}
		c.mu.Unlock()
	}
	return blk, blk.err
}
