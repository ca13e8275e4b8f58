package master

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Summary is what the job writes to --output/job_summary.json when it ends.
// The field names are part of the user contract: add, never rename.
type Summary struct {
	Job string `json:"job"`
	// Mode is "train", "evaluate" or "predict".
	Mode            string  `json:"mode"`
	Status          string  `json:"status"` // "succeeded" | "failed"
	Error           string  `json:"error"`
	DurationSeconds float64 `json:"duration_seconds"`
	// TrainingSeconds runs from the first training task handed out to the
	// last one reported; RecordsPerSecond is the training throughput over it.
	TrainingSeconds  float64        `json:"training_seconds"`
	RecordsPerSecond float64        `json:"records_per_second"`
	ModelDef         string         `json:"model_def"`
	ModelPath        string         `json:"model_path,omitempty"`
	ModelVersion     int64          `json:"model_version"`
	Epochs           []EpochSummary `json:"epochs"`
	Eval             *EvalSummary   `json:"eval"`
	// Evaluations is the history of the evaluation passes, in the order
	// they completed: one per --evaluation_steps crossing, then the final.
	Evaluations []EvalRecord `json:"evaluations"`
	// Predictions describes the CSV a predict job wrote.
	Predictions    *PredictionSummary `json:"predictions,omitempty"`
	Workers        WorkerCounts       `json:"workers"`
	PS             PSCounts           `json:"ps"`
	Tasks          TaskCounts         `json:"tasks"`
	CorruptRecords int64              `json:"corrupt_records"`
	// FirstCorruptRecord names where the data is bad, when any record was.
	FirstCorruptRecord string `json:"first_corrupt_record,omitempty"`
}

// EpochSummary is the exactly-once ledger of one training epoch.
type EpochSummary struct {
	Epoch               int   `json:"epoch"`
	Records             int64 `json:"records"`
	RecordsTrained      int64 `json:"records_trained"`
	RecordsTrainedTwice int64 `json:"records_trained_twice"`
	RecordsMissed       int64 `json:"records_missed"`
}

// EvalSummary is the final evaluation on --validation_data.
type EvalSummary struct {
	Accuracy     float64 `json:"accuracy"`
	Loss         float64 `json:"loss"`
	Records      int64   `json:"records"`
	ModelVersion int64   `json:"model_version"`
}

// EvalRecord is one evaluation pass. Version is the model version the pass
// was queued at; each worker evaluates the parameters it pulls when it
// starts a task, which in asynchronous training may be newer, and
// MinVersionUsed/MaxVersionUsed are the versions actually evaluated.
type EvalRecord struct {
	Version        int64   `json:"version"`
	Accuracy       float64 `json:"accuracy"`
	Loss           float64 `json:"loss"`
	Records        int64   `json:"records"`
	MinVersionUsed int64   `json:"min_version_used"`
	MaxVersionUsed int64   `json:"max_version_used"`
	// Final marks the evaluation at the end of training (or the pass of an
	// evaluate job); it is also the summary's "eval".
	Final bool `json:"final,omitempty"`
}

// PredictionSummary is where a predict job wrote its predictions.
type PredictionSummary struct {
	Path    string `json:"path"`
	Records int64  `json:"records"`
	// CorruptRecords are rows with no prediction (unreadable records).
	CorruptRecords int64 `json:"corrupt_records"`
}

// WorkerCounts counts worker instances over the job's life.
type WorkerCounts struct {
	Launched   int `json:"launched"`
	Lost       int `json:"lost"`
	Relaunched int `json:"relaunched"`
}

// PSCounts counts parameter-server instances over the job's life.
type PSCounts struct {
	Launched   int `json:"launched"`
	Lost       int `json:"lost"`
	Relaunched int `json:"relaunched"`
}

// TaskCounts counts task outcomes.
type TaskCounts struct {
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Requeued  int64 `json:"requeued"`
}

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
