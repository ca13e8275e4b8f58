//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package wire

import "unsafe"

// nativeLittleEndian says that float32s are stored as the wire stores them.
const nativeLittleEndian = true

// putFloats writes src into dst (len 4*len(src)) as little-endian bytes.
// The host is little-endian, so that is the in-memory layout: one memmove.
func putFloats(dst []byte, src []float32) {
	if len(src) == 0 {
		return
	}
	copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

// getFloats is the inverse of putFloats. Viewing dst (which is aligned) as
// bytes, rather than src as floats, keeps it correct for unaligned src.
func getFloats(dst []float32, src []byte) {
	if len(dst) == 0 {
		return
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
}

// viewFloats returns src read in place as float32s, when it is 4-byte
// aligned (always, for contents in a page-aligned region or buffer whose
// earlier tensors are float32).
func viewFloats(src []byte) ([]float32, bool) {
	if len(src) == 0 {
		return []float32{}, true
	}
	if len(src)%4 != 0 || uintptr(unsafe.Pointer(&src[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(src)/4), true
}
