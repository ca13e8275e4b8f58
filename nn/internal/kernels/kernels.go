// Package kernels holds nn's vectorized inner loops in Go assembly (a
// package that uses cgo, as nn does with OpenBLAS, cannot hold Go
// assembly itself). Each kernel has a portable Go counterpart in nn that
// it is tested against, and callers check Enabled before using one.
package kernels
