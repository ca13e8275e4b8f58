//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package wire

func putFloats(dst []byte, src []float32) { putFloatsPortable(dst, src) }

func getFloats(dst []float32, src []byte) { getFloatsPortable(dst, src) }
