package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/data"
)

// TestCorruptCSVRecords trains on a CSV copy of part of Fashion-MNIST with
// a few malformed rows: the job succeeds, the bad rows are skipped, counted
// and named in the summary, and the ledger still covers every record.
func TestCorruptCSVRecords(t *testing.T) {
	needData(t)
	src, err := data.Open(filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const n = 3000
	b, err := src.Read(0, n)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := map[int]string{17: "not-a-number", 1500: "", 2999: "short"}
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		row := b.Features[i*784 : (i+1)*784]
		fields := make([]string, 0, 785)
		for _, v := range row {
			fields = append(fields, fmt.Sprint(v))
		}
		switch corrupt[i] {
		case "not-a-number":
			fields[100] = "x1"
		case "short":
			fields = fields[:10]
		}
		if _, bad := corrupt[i]; bad && corrupt[i] == "" {
			fields[0] = "NaN"
		}
		fields = append(fields, fmt.Sprint(b.Labels[i]))
		buf.WriteString(strings.Join(fields, ",") + "\n")
	}
	path := filepath.Join(t.TempDir(), "fashion.csv")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	j := startJob(t, "--model_def=fashion_mnist.mlp", "--training_data="+path, "--num_workers=2", "--num_epochs=1")
	if code := j.wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, j.stderr.String())
	}
	s := j.summary()
	assertExactlyOnce(t, s, 1, n)
	if s.CorruptRecords != 3 {
		t.Errorf("corrupt_records = %d, want 3", s.CorruptRecords)
	}
	if !strings.Contains(s.FirstCorruptRecord, "fashion.csv") || !strings.Contains(s.FirstCorruptRecord, "record") {
		t.Errorf("first_corrupt_record %q does not name the file and record", s.FirstCorruptRecord)
	}
	if !strings.Contains(j.stdout.String(), "corrupt records skipped: 3") {
		t.Errorf("final report does not mention the corrupt records:\n%s", j.stdout.String())
	}
}
