//go:build !amd64 || purego

package optimizer

// adamVector has no vector form here: the scalar loop does everything.
func adamVector(p, g, m, v []float32, lrt, c1, c2, eps float32) int { return 0 }
