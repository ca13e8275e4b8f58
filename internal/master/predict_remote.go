package master

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/internal/storage"
)

// Predictions on object storage: an object cannot be appended to or
// renamed, so the rows go to a local stand-in in the job's output
// directory (with the same temp file, failover and commit as a local
// output), and the committed file is uploaded whole. A commit again after
// a master's death uploads it again.

// predictionsStandIn is the local file that stands in for predictions on
// object storage, in the job's (local) output directory.
const predictionsStandIn = "predictions.csv"

// predictionsPath is where the predictions are written locally: the
// output itself, or its stand-in.
func (m *Master) predictionsPath() string {
	if storage.IsRemote(m.cfg.PredictionOutputs) {
		return filepath.Join(m.cfg.Output, predictionsStandIn)
	}
	return m.cfg.PredictionOutputs
}

// upload copies the committed file to its object, when it has one.
func (pf *predictionFile) upload() error {
	if pf.remote == "" {
		return nil
	}
	f, err := os.Open(pf.path)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	defer f.Close()
	ctx := context.Background()
	s, name, err := storage.OpenParent(ctx, pf.remote, os.Getenv)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	w, err := s.Create(ctx, name)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	if _, err := f.WriteTo(w); err != nil {
		w.Abort()
		return fmt.Errorf("--prediction_outputs: upload to %s: %w", pf.remote, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	return nil
}

// checkRemoteOutput checks, before anything runs, that the bucket of an
// object-storage output answers and takes the credentials.
func checkRemoteOutput(ctx context.Context, location string) error {
	s, name, err := storage.OpenParent(ctx, location, os.Getenv)
	if err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	if _, err := s.List(ctx, name); err != nil {
		return fmt.Errorf("--prediction_outputs: %w", err)
	}
	return nil
}
