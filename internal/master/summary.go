package master

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/internal/master/job"
)

// The summary a job writes is the core's (package job); its field names are
// part of the user contract.
type (
	Summary           = job.Summary
	EpochSummary      = job.EpochSummary
	EvalSummary       = job.EvalSummary
	EvalRecord        = job.EvalRecord
	PredictionSummary = job.PredictionSummary
	WorkerCounts      = job.WorkerCounts
	PSCounts          = job.PSCounts
	PSRestore         = job.PSRestore
	TaskCounts        = job.TaskCounts
	RingSummary       = job.RingSummary
	RingRecovery      = job.RingRecovery
	RingJoin          = job.RingJoin
	WorkerChecksum    = job.WorkerChecksum
)

// WriteSummary writes s as dir/job_summary.json atomically.
func WriteSummary(dir string, s *Summary) (string, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode job summary: %w", err)
	}
	path := filepath.Join(dir, "job_summary.json")
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return "", err
	}
	return path, nil
}

// writeFileAtomic writes via a temp file, fsync and rename, so a reader
// never sees a half-written file even if the master is killed.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}
