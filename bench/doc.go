// Package bench holds the whole-system benchmarks of elasticdl: local
// training jobs (records/s with 1 and 2 workers), and the convergence
// experiment of AllReduce under a changing world size (TestConvergence,
// with the table and plot it draws). Component benchmarks live beside their
// packages (nn, model/zoo, data, internal/ps/...); run.sh runs them all and
// RESULTS.md records the figures with their commands.
package bench
