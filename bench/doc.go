// Package bench holds the whole-system benchmarks of elasticdl: local
// training jobs (records/s with 1 and 2 workers, both strategies), an
// AllReduce job's recovery and join times, the convergence experiment of
// AllReduce under a changing world size (TestConvergence, with the table
// and plot it draws), and internal/collective's ring allreduce against
// torch.distributed's gloo (collective_vs_gloo.sh, with collective_test.go
// and gloo_allreduce.py). Component benchmarks live beside their packages
// (nn, model/zoo, data, internal/ps/...); run.sh runs them all and
// RESULTS.md records the figures with their commands.
package bench
