package worker

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"elasticdl/model"
	"elasticdl/model/zoo"
	"elasticdl/proto/masterpb"
)

// A task's records read ahead are the ones its read returns (the same
// batch, not read again); a read ahead of another range is dropped, and a
// read ahead that failed is retried as any read.
func TestReadAhead(t *testing.T) {
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{WorkerID: 0, MasterAddr: "x", PSAddrs: []string{"y"}, ModelDef: "fashion_mnist.mlp", MinibatchSize: 4}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "d.csv")
	if err := os.WriteFile(path, []byte("1,2,0\n3,4,1\n5,x,0\n7,8,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := func(id, start, end int64) *masterpb.Task {
		return &masterpb.Task{Id: id, Shard: &masterpb.Shard{Name: path, Start: start, End: end}}
	}
	w.readAhead(task(1, 0, 4))
	ahead := w.ahead
	var report masterpb.ReportTaskResultRequest
	b, err := w.read(task(1, 0, 4), &report)
	if err != nil || b != ahead.b || w.ahead != nil {
		t.Fatalf("read = %p, %v; want the batch read ahead %p, taken", b, err, ahead.b)
	}
	if b.N != 3 || report.CorruptRecords != 1 || report.FirstCorruptError == "" {
		t.Errorf("%d records, report %+v: want 3 and 1 corrupt", b.N, &report)
	}
	w.readAhead(task(2, 0, 2))
	other := w.ahead
	<-other.done
	b, err = w.read(task(3, 2, 4), &report)
	if err != nil || b == other.b || !slices.Equal(b.Labels, []int32{1}) || w.ahead != other {
		t.Errorf("another range: %v, labels %v; the read ahead must stay for its task", err, b.Labels)
	}
	w.readAhead(task(4, 0, 2))
	<-w.ahead.done
	w.ahead.err = os.ErrDeadlineExceeded // as if the read had failed
	if b, err = w.read(task(4, 0, 2), &report); err != nil || b.N != 2 {
		t.Errorf("after a failed read ahead: %v, %v", b, err)
	}
}
