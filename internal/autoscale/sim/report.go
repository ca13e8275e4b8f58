package sim

import (
	"fmt"
	"strings"
)

// Compare runs every workload through every policy and returns the
// summaries by policy (means over workloads).
func Compare(ws []Workload, policies []Policy, cfg Config) ([]Summary, error) {
	out := make([]Summary, len(policies))
	for _, w := range ws {
		for i, p := range policies {
			res, err := Run(w, p, cfg)
			if err != nil {
				return nil, fmt.Errorf("comparing policies: %w", err)
			}
			out[i].add(res, len(ws))
		}
	}
	return out, nil
}

// Table is the comparison as a Markdown table, ratios to the first
// policy (the baseline) and to the last (the oracle).
func Table(policies []Policy, sums []Summary) string {
	var b strings.Builder
	base, oracle := sums[0], sums[len(sums)-1]
	b.WriteString("| policy | mean JCT, s (h) | ÷ " + policies[0].String() + " | ÷ " + policies[len(policies)-1].String() +
		" | makespan, s (h) | longest excess pending, s | resizes per workload | max ÷ min share among jobs training, median |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for i, p := range policies {
		s := sums[i]
		fmt.Fprintf(&b, "| %v | %.0f (%.2f) | %.2f | %.2f | %.0f (%.1f) | %.1f | %.0f | %.2f |\n", p, s.MeanJCT, s.MeanJCT/3600,
			s.MeanJCT/base.MeanJCT, s.MeanJCT/oracle.MeanJCT, s.Makespan, s.Makespan/3600, s.LongestExcessPending, s.Resizes, s.ShareRatio)
	}
	return b.String()
}
