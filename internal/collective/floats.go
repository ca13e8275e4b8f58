package collective

import "unsafe"

// The wire carries float32 values as raw little-endian bytes. On a
// little-endian host that is their memory layout, so a segment is written
// from, and read into, the caller's slice itself (floatBytes): no encoding
// pass and no copy. A big-endian host converts through a scratch buffer
// (putFloats, getFloats), which tests also run everywhere to pin the format.

// hostLittleEndian reports whether float32 values are stored little-endian.
func hostLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// floatBytes views f as its raw bytes (no copy). Only meaningful as wire
// bytes on a little-endian host.
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// addInto adds src into dst element-wise: dst[i] = dst[i] + src[i], in
// float32. Addition is commutative bit for bit in IEEE 754, so which operand
// is "own" and which "received" does not change the result; only the order
// in which the members' values are accumulated does (see allReducePlan).
func addInto(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}
