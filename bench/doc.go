// Package bench holds the whole-system benchmarks of elasticdl: local
// training jobs (records/s with 1 and 2 workers). Component benchmarks live
// beside their packages (nn, model/zoo, data, internal/ps/...); run.sh runs
// them all and RESULTS.md records the figures with their commands.
package bench
