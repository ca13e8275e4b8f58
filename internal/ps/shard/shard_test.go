package shard

import (
	"hash/fnv"
	"testing"
)

// Published FNV-1a 32 test vectors; if these change, every running job's
// routing would change with them.
func TestHashVectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint32
	}{
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
	} {
		if got := Hash(c.in); got != c.want {
			t.Errorf("Hash(%q) = %#x, want %#x", c.in, got, c.want)
		}
	}
}

func TestHashMatchesStdlib(t *testing.T) {
	for _, s := range []string{"dense/kernel", "dense/bias", "conv2d_1/kernel:0", "ü"} {
		h := fnv.New32a()
		h.Write([]byte(s))
		if got, want := Hash(s), h.Sum32(); got != want {
			t.Errorf("Hash(%q) = %#x, hash/fnv says %#x", s, got, want)
		}
	}
}

func TestOfFixed(t *testing.T) {
	// Expected values are the vectors above reduced by hand:
	// 0xe40c292c = 3826002220: mod 2 = 0, mod 3 = 1, mod 7 = 5.
	// 0xbf9cf968 = 3214735720: mod 2 = 0, mod 3 = 1, mod 7 = 0.
	for _, c := range []struct {
		name  string
		numPS int
		want  int
	}{
		{"a", 1, 0}, {"a", 2, 0}, {"a", 3, 1}, {"a", 7, 5},
		{"foobar", 2, 0}, {"foobar", 3, 1}, {"foobar", 7, 0},
	} {
		if got := Of(c.name, c.numPS); got != c.want {
			t.Errorf("Of(%q, %d) = %d, want %d", c.name, c.numPS, got, c.want)
		}
	}
}

func TestOfPanicsOnZero(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Of(_, 0) did not panic")
		}
	}()
	Of("x", 0)
}
