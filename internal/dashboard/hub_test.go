package dashboard

import (
	"fmt"
	"strings"
	"testing"
)

// TestRingBounds: the ring keeps at most RingItems deltas and RingBytes of
// frames, says from which seq it is complete, and its backing array does not
// grow with the number of publishes.
func TestRingBounds(t *testing.T) {
	for _, c := range []struct {
		name       string
		opts       Options
		deltaBytes int
		wantItems  int
	}{
		{"items", Options{}, 10, 1000},
		{"bytes", Options{}, 100 << 10, 10}, // 10 frames of a bit over 100 KiB fit 1 MiB
		{"too big", Options{RingBytes: 1000}, 2000, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := New(c.opts)
			delta := raw(fmt.Sprintf(`{"p":%q}`, strings.Repeat("x", c.deltaBytes)))
			for range 5000 {
				h.Publish(Update{Delta: delta})
			}
			st := h.cur.Load()
			o := h.opts
			if len(st.ring) != c.wantItems || st.ringBytes > o.RingBytes {
				t.Fatalf("ring: %d items, %d bytes; want %d items, at most %d bytes",
					len(st.ring), st.ringBytes, c.wantItems, o.RingBytes)
			}
			if want := st.seq - uint64(len(st.ring)); st.ringFrom != want {
				t.Fatalf("ringFrom %d, want %d", st.ringFrom, want)
			}
			if cap(st.ring) > 2*o.RingItems+16 {
				t.Fatalf("backing array of %d items", cap(st.ring))
			}
			if items, ok := st.after(st.ringFrom); !ok || len(items) != len(st.ring) {
				t.Fatalf("after(ringFrom): %d items, %v", len(items), ok)
			}
			if _, ok := st.after(st.ringFrom - 1); ok && st.ringFrom > 0 {
				t.Fatal("after() resumes from before the ring")
			}
		})
	}
}

// TestRingSharesBacking: an older state's view of the ring is unchanged by
// later publishes, though they share the backing array.
func TestRingSharesBacking(t *testing.T) {
	h := New(Options{RingItems: 3})
	for n := 1; n <= 3; n++ {
		h.Publish(Update{Delta: raw(fmt.Sprintf(`{"n":%d}`, n))})
	}
	old := h.cur.Load()
	before := fmt.Sprint(old.ring)
	for n := 4; n <= 100; n++ {
		h.Publish(Update{Delta: raw(fmt.Sprintf(`{"n":%d}`, n))})
	}
	if after := fmt.Sprint(old.ring); after != before {
		t.Fatalf("an old state's ring changed:\n%s\n%s", before, after)
	}
	if items, ok := h.cur.Load().after(97); !ok || len(items) != 3 || items[0].seq != 98 {
		t.Fatalf("after(97): %v %v", items, ok)
	}
}

func TestPublishAfterClose(t *testing.T) {
	h := New(Options{})
	h.Publish(Update{Snapshot: raw(`{}`)})
	h.Close()
	h.Close() // idempotent
	h.Publish(Update{Snapshot: raw(`{}`)})
	if h.Seq() != 1 {
		t.Fatalf("seq %d after a publish on a closed hub", h.Seq())
	}
	if New(Options{}).Boot() == h.Boot() {
		t.Fatal("two hubs with one boot ID")
	}
}
