package master

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"elasticdl/data"
	"elasticdl/proto/masterpb"
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
	// FirstTaskTrainedAt is when the first training task was reported
	// done (wall clock, UTC): how soon an elastic job made progress.
	FirstTaskTrainedAt *time.Time `json:"first_task_trained_at,omitempty"`
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
	Accuracy float64 `json:"accuracy"`
	// AUC: binary (two-class) models only, from the positive-class
	// probabilities (see data.ScoreHistogram); absent when undefined.
	AUC          *float64 `json:"auc,omitempty"`
	Loss         float64  `json:"loss"`
	Records      int64    `json:"records"`
	ModelVersion int64    `json:"model_version"`
}

// EvalRecord is one evaluation pass. Version is the model version the pass
// was queued at; each worker evaluates the parameters it pulls when it
// starts a task, which in asynchronous training may be newer, and
// MinVersionUsed/MaxVersionUsed are the versions actually evaluated.
type EvalRecord struct {
	Version  int64   `json:"version"`
	Accuracy float64 `json:"accuracy"`
	// AUC as in EvalSummary.
	AUC            *float64 `json:"auc,omitempty"`
	Loss           float64  `json:"loss"`
	Records        int64    `json:"records"`
	MinVersionUsed int64    `json:"min_version_used"`
	MaxVersionUsed int64    `json:"max_version_used"`
	// Final marks the evaluation at the end of training (or the pass of an
	// evaluate job); it is also the summary's "eval".
	Final bool `json:"final,omitempty"`
}

// aucOf returns the AUC of h, nil when h is nil or the AUC is undefined (one
// class only).
func aucOf(h *data.ScoreHistogram) *float64 {
	if h == nil {
		return nil
	}
	auc := h.AUC()
	if math.IsNaN(auc) {
		return nil
	}
	return &auc
}

// histFromProto checks a task's score histogram: data.AUCBuckets buckets
// per class (so that tasks merge), counting the task's records.
func histFromProto(h *masterpb.ScoreHistogram, records int64) (*data.ScoreHistogram, error) {
	d := &data.ScoreHistogram{Positive: h.Positive, Negative: h.Negative}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if len(d.Positive) != data.AUCBuckets || d.Count() != records {
		return nil, fmt.Errorf("score histogram of %d buckets counting %d records, want %d buckets counting %d",
			len(d.Positive), d.Count(), data.AUCBuckets, records)
	}
	return d, nil
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
	// Preempted counts the lost ones that the cluster took back for
	// higher-priority work; MaxRunning is the most that ran at once.
	Preempted  int `json:"preempted"`
	MaxRunning int `json:"max_running"`
}

// PSCounts counts parameter-server instances over the job's life.
type PSCounts struct {
	Launched   int `json:"launched"`
	Lost       int `json:"lost"`
	Relaunched int `json:"relaunched"`
	Preempted  int `json:"preempted"`
	// Restores are the checkpoints the PS processes alive at the end of
	// training had restored when they started (a PS relaunched after a
	// loss, or a warm start), by PS index; read from the PS before the
	// model is saved.
	Restores []PSRestore `json:"restores,omitempty"`
}

// PSRestore is the checkpoint one PS restored: its version and directory.
type PSRestore struct {
	PS      int    `json:"ps"`
	Version int64  `json:"version"`
	Dir     string `json:"dir"`
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
