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
// start from it with --checkpoint_dir_for_init=OUTPUT/model.
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
	// Only the names and shapes matter: the values come from the PS.
	net := m.spec.Build(rand.New(rand.NewSource(m.cfg.Seed)))
	params := net.Params()
	if _, err := c.Pull(ctx, params); err != nil {
		return "", 0, fmt.Errorf("pull final parameters: %w", err)
	}
	version := c.Version()
	out := &pserverpb.Checkpoint{Version: version, Shard: 0, NumShards: 1}
	for _, p := range params {
		out.DenseParameters = append(out.DenseParameters, wire.EncodeTensor(p.Name, p.Value.Shape, p.Value.Data))
	}
	slices.SortFunc(out.DenseParameters, func(a, b *pserverpb.Tensor) int { return cmp.Compare(a.GetName(), b.GetName()) })
	root := filepath.Join(m.cfg.Output, "model")
	path, err := checkpoint.Write(root, out)
	if err != nil {
		return "", 0, fmt.Errorf("write model: %w", err)
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
