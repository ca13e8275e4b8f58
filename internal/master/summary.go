package master

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/master/job"
	"elasticdl/internal/storage"
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
	Failover          = job.Failover
	RingSummary       = job.RingSummary
	RingRecovery      = job.RingRecovery
	RingJoin          = job.RingJoin
	WorkerChecksum    = job.WorkerChecksum
)

// WriteSummary writes s as dir/job_summary.json atomically.
// dir may be s3://bucket/prefix: the summary is then one object there.
func WriteSummary(dir string, s *Summary) (string, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode job summary: %w", err)
	}
	if storage.IsRemote(dir) {
		ctx := context.Background()
		st, err := storage.Open(ctx, dir, os.Getenv)
		if err != nil {
			return "", fmt.Errorf("write job summary: %w", err)
		}
		if err := storage.WriteAll(ctx, st, summaryFile, append(b, '\n')); err != nil {
			return "", fmt.Errorf("write job summary: %w", err)
		}
		return st.URL(summaryFile), nil
	}
	path := filepath.Join(dir, summaryFile)
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return "", err
	}
	return path, nil
}

const summaryFile = "job_summary.json"

// ReadSummary reads dir/job_summary.json (as WriteSummary wrote it).
func ReadSummary(dir string) (*Summary, error) {
	var b []byte
	var err error
	if storage.IsRemote(dir) {
		ctx := context.Background()
		var st storage.Store
		if st, err = storage.Open(ctx, dir, os.Getenv); err == nil {
			b, err = storage.ReadAll(ctx, st, summaryFile)
		}
	} else {
		b, err = os.ReadFile(filepath.Join(dir, summaryFile))
	}
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("job summary: %w", err)
	}
	return &s, nil
}

// writeFileAtomic writes path so that a reader never sees it half
// written, even if the master is killed.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	return atomicfile.Write(path, data)
}
