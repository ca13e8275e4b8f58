package master

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"time"

	"elasticdl/internal/ps/checkpoint"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// progressMeter keeps the recent training rate and loss for progress lines.
type progressMeter struct {
	records     int64 // all records processed (trained or corrupt)
	lastRecords int64
	lastAt      time.Time
	loss        float64 // exponential moving average of task mean loss
	haveLoss    bool
}

func (p *progressMeter) add(now time.Time, records int64, lossSum float64, steps int64) {
	p.records += records
	if steps > 0 {
		l := lossSum / float64(steps)
		if !p.haveLoss {
			p.loss, p.haveLoss = l, true
		} else {
			p.loss = 0.8*p.loss + 0.2*l
		}
	}
	if p.lastAt.IsZero() {
		p.lastAt = now
	}
}

// rate returns records/s since the previous call.
func (p *progressMeter) rate(now time.Time) float64 {
	dt := now.Sub(p.lastAt).Seconds()
	if p.lastAt.IsZero() || dt <= 0 {
		p.lastAt, p.lastRecords = now, p.records
		return 0
	}
	r := float64(p.records-p.lastRecords) / dt
	p.lastAt, p.lastRecords = now, p.records
	return r
}

func (m *Master) logProgress() {
	m.mu.Lock()
	pr := m.disp.Progress()
	rate := m.progress.rate(m.now())
	loss := math.NaN()
	if m.progress.haveLoss {
		loss = m.progress.loss
	}
	workers, ps := 0, 0
	for _, w := range m.workers {
		if w.running {
			workers++
		}
	}
	for _, p := range m.ps {
		if p.running {
			ps++
		}
	}
	training := m.cfg.training()
	m.mu.Unlock()
	if !training {
		m.log.Info("progress", "tasks_done", pr.TasksDone, "tasks_todo", pr.TasksTodo, "tasks_doing", pr.TasksDoing,
			"workers", fmt.Sprintf("%d/%d", workers, m.cfg.NumWorkers), "ps", fmt.Sprintf("%d/%d", ps, m.cfg.NumPS))
		return
	}
	m.log.Info("progress",
		"epoch", fmt.Sprintf("%d/%d", pr.Epoch, pr.NumEpochs),
		"records", fmt.Sprintf("%d/%d", pr.EpochRecordsDone, pr.EpochRecordsTotal),
		"records_per_s", math.Round(rate),
		"loss", fmt.Sprintf("%.4f", loss),
		"workers", fmt.Sprintf("%d/%d", workers, m.cfg.NumWorkers),
		"ps", fmt.Sprintf("%d/%d", ps, m.cfg.NumPS))
}

// buildSummary assembles the job summary; m.mu must be held.
func (m *Master) buildSummary(runErr error, d time.Duration) *Summary {
	s := m.summary
	s.DurationSeconds = math.Round(d.Seconds()*1000) / 1000
	s.Status = "succeeded"
	if runErr != nil {
		s.Status, s.Error = "failed", runErr.Error()
	}
	if !m.trainingStart.IsZero() && m.trainingEnd.After(m.trainingStart) {
		secs := m.trainingEnd.Sub(m.trainingStart).Seconds()
		s.TrainingSeconds = math.Round(secs*1000) / 1000
		s.RecordsPerSecond = math.Round(float64(m.disp.Progress().RecordsReported) / secs)
	}
	s.Epochs = nil
	for _, c := range m.disp.Coverage() {
		s.Epochs = append(s.Epochs, EpochSummary{
			Epoch:               c.Epoch,
			Records:             c.Records,
			RecordsTrained:      c.RecordsTrained,
			RecordsTrainedTwice: c.RecordsTrainedTwice,
			RecordsMissed:       c.RecordsMissed,
		})
	}
	s.Evaluations = append([]EvalRecord{}, m.summary.Evaluations...) // [] rather than null
	if p := m.passes[m.finalKey]; p != nil && p.metrics.records > 0 {
		r := p.result()
		s.Eval = &EvalSummary{
			Accuracy:     r.Accuracy,
			AUC:          r.AUC,
			Loss:         r.Loss,
			Records:      r.Records,
			ModelVersion: r.MaxVersionUsed,
		}
	}
	return &s
}

// saveModel pulls the trained parameters from the parameter servers and
// writes them as a one-shard checkpoint without optimizer slots,
// --output/model/version-N/variables-0-of-1.ckpt, so that another job can
// start from it with --checkpoint_dir_for_init=OUTPUT/model. A model with
// embedding tables is written by the PS themselves (SaveModel), one file
// per shard with slots and table rows, --output/model/version-N/
// variables-i-of-n.ckpt; the path returned is then the version directory.
// It also records in the summary the checkpoints the PS restored.
func (m *Master) saveModel(ctx context.Context) (string, int64, error) {
	m.mu.Lock()
	addrs := append([]string(nil), m.psAddrs...)
	m.liveGen++
	live, gen := len(m.workers), m.liveGen
	m.mu.Unlock()
	if !m.cfg.UseAsync {
		// Sync SGD: no gradient is left unapplied in an accumulator.
		if err := m.setLiveWorkers(ctx, addrs, live, gen, true); err != nil {
			return "", 0, fmt.Errorf("flush accumulated gradients: %w", err)
		}
	}
	c, err := client.Dial(ctx, addrs)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("status of the PS: %w", err)
	}
	m.recordRestores(st)
	root := filepath.Join(m.cfg.Output, "model")
	var path string
	var version int64
	if m.spec.Sparse != nil {
		// Embedding tables live only on the PS: each shard writes itself
		// (parameters, slots, table rows) as one file of a complete
		// checkpoint version, labelled with the highest shard version.
		version = -1
		for _, s := range st {
			version = max(version, s.Version)
		}
		if _, err := c.SaveModel(ctx, root, version); err != nil {
			return "", 0, fmt.Errorf("write model: %w", err)
		}
		path = checkpoint.VersionDir(root, version)
	} else {
		// Only the names and shapes matter: the values come from the PS.
		net := m.spec.Build(rand.New(rand.NewSource(m.cfg.Seed)))
		params := net.Params()
		if _, err := c.Pull(ctx, params); err != nil {
			return "", 0, fmt.Errorf("pull final parameters: %w", err)
		}
		version = c.Version()
		out := &pserverpb.Checkpoint{Version: version, Shard: 0, NumShards: 1}
		for _, p := range params {
			out.DenseParameters = append(out.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
		}
		slices.SortFunc(out.DenseParameters, func(a, b *pserverpb.Tensor) int { return cmp.Compare(a.GetName(), b.GetName()) })
		if path, err = checkpoint.Write(root, out); err != nil {
			return "", 0, fmt.Errorf("write model: %w", err)
		}
	}
	// The directory holds one model: an earlier job's left there would be
	// the one a warm start picks if its version were higher.
	vs, err := checkpoint.Versions(root)
	if err != nil {
		return "", 0, fmt.Errorf("write model: %w", err)
	}
	for _, v := range vs {
		if v == version {
			continue
		}
		if err := os.RemoveAll(checkpoint.VersionDir(root, v)); err != nil {
			return "", 0, fmt.Errorf("remove an earlier model: %w", err)
		}
	}
	return path, version, nil
}

// recordRestores adds to the summary the checkpoint each PS's current
// process restored at start (a relaunch after a loss, or a warm start).
func (m *Master) recordRestores(st []client.ShardStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.summary.PS.Restores = nil
	for i, s := range st {
		if s.RestoredVersion >= 0 {
			m.summary.PS.Restores = append(m.summary.PS.Restores, PSRestore{PS: i, Version: s.RestoredVersion, Dir: s.RestoredDir})
			m.log.Info("PS restored a checkpoint", "ps", i, "version", s.RestoredVersion, "dir", s.RestoredDir)
		}
	}
}
