package task

import (
	"testing"
	"time"
)

func TestProgressCounts(t *testing.T) {
	cfg := baseConfig()
	cfg.NumEpochs = 2
	d := mustNew(t, cfg)
	a := mustGet(t, d, 1, t0)
	b := mustGet(t, d, 1, t0)
	mustReport(t, d, 1, a, Result{Records: 8, Corrupt: 2, LossSum: 1.5, Steps: 2}, t0.Add(time.Second))
	want := Progress{
		Epoch: 1, NumEpochs: 2,
		EpochRecordsDone: 10, EpochRecordsTotal: 35,
		RecordsDone: 10, RecordsTotal: 70,
		TasksTodo: 2, TasksDoing: 1, TasksDone: 1,
		RecordsReported: 8, CorruptRecords: 2, LossSum: 1.5, Steps: 2,
		LastAccepted: t0.Add(time.Second),
	}
	if got := d.Progress(); got != want {
		t.Fatalf("Progress =\n%+v\nwant\n%+v", got, want)
	}
	_ = b
}
