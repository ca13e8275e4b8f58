//go:build race

package job

// underRace: the test binary runs under the race detector.
const underRace = true
