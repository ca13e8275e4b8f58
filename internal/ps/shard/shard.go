// Package shard decides which parameter server holds a parameter. Workers
// (routing pushes and pulls) and servers (rejecting misrouted parameters)
// must agree on it, so it lives apart from both.
package shard

// FNV-1a 32-bit constants (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	offset32 = 2166136261
	prime32  = 16777619
)

// Of returns the shard index, in [0, numPS), of the parameter called name:
// the FNV-1a 32-bit hash of the name's bytes modulo numPS. The mapping is
// part of the job's contract (a relaunched PS or worker must route the same
// way), so it must never change. It panics when numPS < 1.
func Of(name string, numPS int) int {
	if numPS < 1 {
		panic("shard: numPS must be at least 1")
	}
	return int(Hash(name) % uint32(numPS))
}

// Hash is FNV-1a 32 of name, done by hand to avoid hash/fnv's allocation.
func Hash(name string) uint32 {
	h := uint32(offset32)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= prime32
	}
	return h
}
