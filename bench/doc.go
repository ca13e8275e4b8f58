// Package bench holds the whole-system benchmarks of elasticdl: local
// training jobs (records/s with 1 and 2 workers), and internal/collective's
// ring allreduce against torch.distributed's gloo (collective_vs_gloo.sh,
// with collective_test.go and gloo_allreduce.py). Component benchmarks live
// beside their packages (nn, model/zoo, data, internal/ps/...); run.sh runs
// them all and RESULTS.md records the figures with their commands.
package bench
