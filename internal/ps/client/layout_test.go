package client

import (
	"testing"

	"elasticdl/internal/ps/shard"
)

func TestShardOf(t *testing.T) {
	// Fixed values: routing must never change across releases. FNV-1a 32
	// of "a" is 0xe40c292c = 3826002220 (mod 3 = 1, mod 7 = 5).
	for _, c := range []struct {
		name string
		n    int
		want int
	}{
		{"a", 1, 0}, {"a", 3, 1}, {"a", 7, 5},
		{"dense/kernel", 2, 0}, {"dense/bias", 2, 0}, {"out/kernel", 2, 1}, {"out/bias", 2, 1},
	} {
		if got := ShardOf(c.name, c.n); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.name, c.n, got, c.want)
		}
		if got := shard.Of(c.name, c.n); got != ShardOf(c.name, c.n) {
			t.Errorf("client and server disagree on %q", c.name)
		}
	}
}
