//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package wire

// nativeLittleEndian says that float32s are stored as the wire stores them.
const nativeLittleEndian = false

func putFloats(dst []byte, src []float32) { putFloatsPortable(dst, src) }

func getFloats(dst []float32, src []byte) { getFloatsPortable(dst, src) }

// viewFloats cannot read little-endian floats in place on this host.
func viewFloats([]byte) ([]float32, bool) { return nil, false }
