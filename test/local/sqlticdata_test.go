package local

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"elasticdl/data"
	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqldb/sqldbtest"
)

// Issue 30's acceptance: ticdata (hack/ticdata.sh) loaded into tables on
// each database; TO TRAIN ctr.wide_and_deep … INTO, TO PREDICT … USING and
// TO EVALUATE against the same model trained from the CSV files with the
// same flags and seed; then 3 workers, one killed -9 mid-training.

const ticOptimizer = "adagrad:learning_rate=0.02,initial_accumulator_value=0.001"

// ticCSV reads one of ticdata's CSV files: its header and rows.
func ticCSV(t *testing.T, dir, part string) ([]string, [][]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, part+".csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := csv.NewReader(f).ReadAll()
	if err != nil || len(all) < 2 {
		t.Fatalf("%s.csv: %d rows, %v", part, len(all), err)
	}
	return all[0], all[1:]
}

// loadTic makes a table of ticdata's part on db in the file's column and
// row order: the label and n* columns integers, c* text.
func loadTic(t *testing.T, db *sqldbtest.DB, header []string, rows [][]string) string {
	t.Helper()
	defs := make([]string, len(header))
	for i, h := range header {
		defs[i] = h + " INTEGER"
		if strings.HasPrefix(h, "c") && h != "caravan" {
			defs[i] = h + " TEXT"
		}
	}
	table := db.NewTable(t, defs...)
	var batch [][]any
	for i, r := range rows {
		row := make([]any, len(r))
		for k, v := range r {
			row[k] = v
			if !strings.HasSuffix(defs[k], "TEXT") {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("row %d, %s: %v", i, header[k], err)
				}
				row[k] = n
			}
		}
		// 300 rows of 86 values: within SQLite's variables a statement.
		if batch = append(batch, row); len(batch) == 300 || i == len(rows)-1 {
			db.Insert(t, table, strings.Join(header, ", "), batch...)
			batch = batch[:0]
		}
	}
	return table
}

// ticBaseline trains ctr.wide_and_deep from the CSV files with flags.
func ticBaseline(t *testing.T, dir string, flags ...string) master.Summary {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "schema"))
	if err != nil {
		t.Fatal(err)
	}
	uri := func(part string) string {
		return "csv://" + filepath.Join(dir, part+".csv") + "?header=true&schema=" + strings.TrimSpace(string(raw))
	}
	j := startJob(t, append([]string{"--model_def=ctr.wide_and_deep", "--model_params=dense=23;fields=62",
		"--training_data=" + uri("train"), "--validation_data=" + uri("test")}, flags...)...)
	return j.succeeded(3 * time.Minute)
}

// storedSummary loads model name's row and returns its job's summary.
func storedSummary(t *testing.T, db *sqldbtest.DB, name string) master.Summary {
	t.Helper()
	m, err := sqldb.LoadModel(context.Background(), db.SQL, db.Dialect, name, filepath.Join(t.TempDir(), "model"))
	if err != nil {
		t.Fatal(err)
	}
	return summaryOf(t, []byte(m.Summary))
}

func TestSQLTicdata(t *testing.T) {
	dir := ticdataDir(t)
	header, trainRows := ticCSV(t, dir, "train")
	_, testRows := ticCSV(t, dir, "test")
	flags := []string{"--num_workers=1", "--num_epochs=2", "--minibatch_size=64", "--optimizer=" + ticOptimizer}
	base := ticBaseline(t, dir, flags...)
	if base.Eval == nil || base.Eval.AUC == nil {
		t.Fatalf("the CSV baseline has no AUC: %+v", base.Eval)
	}
	t.Logf("from the CSV files: AUC %.4f", *base.Eval.AUC)
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		train, test := loadTic(t, db, header, trainRows), loadTic(t, db, header, testRows)
		name := modelName(t, db)
		stmt := "SELECT * FROM " + train + " TO TRAIN ctr.wide_and_deep\n  WITH train.epoch = 2, train.minibatch_size = 64,\n" +
			"    train.optimizer = '" + ticOptimizer + "'\n  LABEL caravan INTO " + name
		code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=1",
			"--validation_data="+db.Source("table="+test+"&label=caravan"), "-e", stmt)
		if code != 0 || !strings.Contains(out, "features: 23 dense, 62 categorical") {
			t.Fatalf("TO TRAIN: exit %d\n%s\n%s", code, out, errOut)
		}
		s := storedSummary(t, db, name)
		assertExactlyOnce(t, s, 2, int64(len(trainRows)))
		if s.Eval == nil || s.Eval.AUC == nil || math.Abs(*s.Eval.AUC-*base.Eval.AUC) > 0.005 {
			t.Fatalf("AUC by SQL %+v, from the CSV files %.4f: want within 0.005", s.Eval, *base.Eval.AUC)
		}
		t.Logf("by SQL: AUC %.4f (CSV %.4f)", *s.Eval.AUC, *base.Eval.AUC)
		ticPredict(t, db, name, test, *s.Eval.AUC)
		ticEvaluate(t, db, name, test, len(testRows), *s.Eval.AUC)
	})
}

// ticPredict predicts table test with model name: one row per row of
// SELECT * FROM test, in the order the database returns them (PostgreSQL
// puts a later row in an earlier page's free space, so that is not the
// file's), and the probabilities zipped with those rows' labels rank as
// well as the job's evaluation did.
func ticPredict(t *testing.T, db *sqldbtest.DB, name, test string, auc float64) {
	t.Helper()
	rows := tableRows(t, db, test)
	pred := "p_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + pred) })
	code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=2", "-e",
		"SELECT * FROM "+test+" TO PREDICT "+pred+".caravan USING "+name)
	if code != 0 {
		t.Fatalf("TO PREDICT: exit %d\n%s\n%s", code, out, errOut)
	}
	q, err := db.SQL.Query("SELECT n1, n2, n3, c1, caravan_p1 FROM " + pred)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var scores []float64
	var labels []int32
	for q.Next() {
		var n1, n2, n3 int
		var c1 string
		var p float64
		if err := q.Scan(&n1, &n2, &n3, &c1, &p); err != nil {
			t.Fatal(err)
		}
		i := len(scores)
		got := strings.Join([]string{strconv.Itoa(n1), strconv.Itoa(n2), strconv.Itoa(n3), c1}, ",")
		if i >= len(rows) || got != rows[i][0] {
			t.Fatalf("prediction row %d (%s) is not the query's row %d", i, got, i)
		}
		y, _ := strconv.Atoi(rows[i][1])
		scores, labels = append(scores, p), append(labels, int32(y))
	}
	if err := q.Err(); err != nil || len(scores) != len(rows) {
		t.Fatalf("%s: %d rows, %v; want %d", pred, len(scores), err, len(rows))
	}
	// The evaluation's AUC is from a histogram of 1,000 buckets.
	if got := data.AUC(scores, labels); math.Abs(got-auc) > 0.005 {
		t.Errorf("the predictions' AUC against the file's labels %.4f, the job's %.4f", got, auc)
	}
}

// tableRows reads n1, n2, n3 and c1 joined, and caravan, of each row of
// table, in the order the database returns them.
func tableRows(t *testing.T, db *sqldbtest.DB, table string) [][2]string {
	t.Helper()
	q, err := db.SQL.Query("SELECT n1, n2, n3, c1, caravan FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var rows [][2]string
	for q.Next() {
		var n1, n2, n3, y int
		var c1 string
		if err := q.Scan(&n1, &n2, &n3, &c1, &y); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, [2]string{strings.Join([]string{strconv.Itoa(n1), strconv.Itoa(n2), strconv.Itoa(n3), c1}, ","), strconv.Itoa(y)})
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// ticEvaluate evaluates model name on table test by TO EVALUATE: the AUC
// written is the training job's own on the same rows.
func ticEvaluate(t *testing.T, db *sqldbtest.DB, name, test string, n int, auc float64) {
	t.Helper()
	results := "r_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() { db.SQL.Exec("DROP TABLE IF EXISTS " + results) })
	code, out, errOut := runSQL(t, "--datasource="+db.URI, "-e", "SELECT * FROM "+test+" TO EVALUATE "+name+
		" WITH validation.metrics = 'AUC' LABEL caravan INTO "+results)
	if code != 0 {
		t.Fatalf("TO EVALUATE: exit %d\n%s\n%s", code, out, errOut)
	}
	var got float64
	var records int
	err := db.SQL.QueryRow("SELECT value, records FROM "+results+" WHERE model = '"+name+"' AND metric = 'AUC'").Scan(&got, &records)
	if err != nil || math.Abs(got-auc) > 1e-9 || records != n {
		t.Errorf("AUC written %v on %d rows, %v; the training job's %v on %d", got, records, err, auc, n)
	}
}

// TestSQLTicdataWorkerKilled: TO TRAIN on ticdata with 3 workers, one
// killed -9 mid-training, on each database: the stored model's job
// trained every record once per epoch.
func TestSQLTicdataWorkerKilled(t *testing.T) {
	dir := ticdataDir(t)
	header, trainRows := ticCSV(t, dir, "train")
	_, testRows := ticCSV(t, dir, "test")
	const epochs = 6
	sqldbtest.Each(t, func(t *testing.T, db *sqldbtest.DB) {
		train, test := loadTic(t, db, header, trainRows), loadTic(t, db, header, testRows)
		name := modelName(t, db)
		j := startSQL(t, "--datasource="+db.URI, "--num_workers=3", "--log_interval=200ms",
			"--validation_data="+db.Source("table="+test+"&label=caravan"), "-e",
			"SELECT * FROM "+train+" TO TRAIN ctr.wide_and_deep WITH train.epoch = "+strconv.Itoa(epochs)+
				", train.minibatch_size = 32, train.optimizer = '"+ticOptimizer+"' LABEL caravan INTO "+name)
		var victim int
		waitFor(t, 2*time.Minute, "training progress with 3 workers", func() bool {
			ws := j.children("worker")
			if j.recordsDone() < int64(len(trainRows)) || len(ws) != 3 {
				return false
			}
			victim = ws[0]
			return true
		})
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed worker pid %d at %d records", victim, j.recordsDone())
		if code := j.wait(3 * time.Minute); code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, j.stdout.String(), j.stderr.String())
		}
		s := storedSummary(t, db, name)
		assertExactlyOnce(t, s, epochs, int64(len(trainRows)))
		if s.Workers.Lost != 1 || s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC < 0.65 {
			t.Errorf("workers %+v, eval %+v: want one lost and an AUC of at least 0.65", s.Workers, s.Eval)
		}
	})
}

// startSQL starts elasticdl sql args as a job whose progress and
// processes the test can watch (it writes no output directory).
func startSQL(t *testing.T, args ...string) *job {
	t.Helper()
	return startCommand(t, "", append([]string{"sql"}, args...))
}

// TestSQLPyTorch trains the PyTorch DeepFM example (--worker_command) on
// ticdata tables by TO TRAIN: its workers read the snapshot through the
// elasticdl binary's reader, with the database's password from the
// master (PostgreSQL: the reader is the Go workers', tested on all three). The stored model then evaluates by TO EVALUATE to the training
// job's AUC and predicts one row per test row by TO PREDICT, its program
// and classes taken from the models table.
func TestSQLPyTorch(t *testing.T) {
	py := pythonWithTorch(t)
	dir := ticdataDir(t)
	header, trainRows := ticCSV(t, dir, "train")
	_, testRows := ticCSV(t, dir, "test")
	db := sqldbtest.Open(t, "postgres")
	train, test := loadTic(t, db, header, trainRows), loadTic(t, db, header, testRows)
	name := modelName(t, db)
	code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=2", "--worker_command="+py+" ../../examples/pytorch/deepfm.py",
		"--optimizer="+ticOptimizer, "--validation_data="+db.Source("table="+test+"&label=caravan"), "-e",
		"SELECT * FROM "+train+" TO TRAIN deepfm WITH train.epoch = 2 LABEL caravan INTO "+name)
	if code != 0 || !strings.Contains(out, "features: 23 dense, 62 categorical") {
		t.Fatalf("TO TRAIN: exit %d\n%s\n%s", code, out, errOut)
	}
	m, err := sqldb.LoadModel(context.Background(), db.SQL, db.Dialect, name, filepath.Join(t.TempDir(), "model"))
	if err != nil || m.ModelParams != "dense=23; fields=62; num_classes=2" {
		t.Fatalf("stored %+v, %v; want the shape and the classes in its parameters", m.ModelParams, err)
	}
	s := summaryOf(t, []byte(m.Summary))
	assertExactlyOnce(t, s, 2, int64(len(trainRows)))
	if s.Eval == nil || s.Eval.AUC == nil || *s.Eval.AUC < 0.65 {
		t.Fatalf("eval %+v: want an AUC of at least 0.65", s.Eval)
	}
	t.Logf("PyTorch DeepFM by SQL: AUC %.4f", *s.Eval.AUC)
	ticEvaluate(t, db, name, test, len(testRows), *s.Eval.AUC)
	ticPredict(t, db, name, test, *s.Eval.AUC)
}

// TestSQLImageModels: the Fashion-MNIST zoo models train by SQL from a
// table of 784 pixel columns (SQLite), their input shape taken from the
// column count, to a held-out accuracy.
func TestSQLImageModels(t *testing.T) {
	needData(t)
	db := sqldbtest.Open(t, "sqlite")
	src, err := data.Open(filepath.Join(dataDir, "t10k-images-idx3-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := src.Read(0, 4000)
	if err != nil {
		t.Fatal(err)
	}
	defs, names := make([]string, 0, 785), make([]string, 0, 785)
	for i := range 784 {
		defs, names = append(defs, fmt.Sprintf("p%d REAL", i)), append(names, fmt.Sprintf("p%d", i))
	}
	load := func(from, to int) string {
		table := db.NewTable(t, append(defs, "y INTEGER")...)
		var rows [][]any
		for i := from; i < to; i++ {
			row := make([]any, 0, 785)
			for _, v := range b.Features[i*784 : (i+1)*784] {
				row = append(row, float64(v))
			}
			// 40 rows of 785 values: within SQLite's variables a statement.
			if rows = append(rows, append(row, b.Labels[i])); len(rows) == 40 || i == to-1 {
				db.Insert(t, table, strings.Join(names, ", ")+", y", rows...)
				rows = rows[:0]
			}
		}
		return table
	}
	train, test := load(0, 3000), load(3000, 4000)
	for _, model := range []string{"fashion_mnist.mlp", "fashion_mnist.cnn"} {
		name := modelName(t, db)
		code, out, errOut := runSQL(t, "--datasource="+db.URI, "--num_workers=2", "--validation_data="+db.Source("table="+test+"&label=y"),
			"-e", "SELECT * FROM "+train+" TO TRAIN "+model+" WITH train.epoch = 2 LABEL y INTO "+name)
		if code != 0 || !strings.Contains(out, "features: 784 dense, 0 categorical") {
			t.Fatalf("%s: exit %d\n%s\n%s", model, code, out, errOut)
		}
		s := storedSummary(t, db, name)
		assertExactlyOnce(t, s, 2, 3000)
		// 3,000 images, 2 epochs: 0.771 (mlp) and 0.765 (cnn) in one run.
		if s.Eval == nil || s.Eval.Accuracy < 0.65 || s.Eval.Records != 1000 {
			t.Errorf("%s: eval %+v, want an accuracy of at least 0.65 on 1000 records", model, s.Eval)
		}
		t.Logf("%s by SQL on 3000 images: held-out accuracy %.4f", model, s.Eval.Accuracy)
	}
}
