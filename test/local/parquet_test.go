package local

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// parquetSource writes a directory of two Parquet files of 150 rows each
// (row groups of 40): numbers, text, nulls, and a null label (record 17,
// corrupt). It returns the parquet:// URI that reads them with a schema.
func parquetSource(t *testing.T) string {
	type row struct {
		Y *int64  `parquet:"y"`
		A float64 `parquet:"a"`
		B *int32  `parquet:"b"`
		D string  `parquet:"d"`
		E *string `parquet:"e"`
		G string  `parquet:"g"`
	}
	dir := filepath.Join(t.TempDir(), "pq")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var rows []row
	for i := range 300 {
		y, b, e := int64(i%2), int32(i*i%1000), fmt.Sprintf("w%d", i%11)
		r := row{Y: &y, A: float64(i)*0.37 - 5, B: &b, D: fmt.Sprintf(" v%d ", i%7), E: &e, G: []string{"red", "green", "blue", ""}[i%4]}
		switch {
		case i == 17:
			r.Y = nil
		case i%9 == 0:
			r.B, r.E = nil, nil
		}
		rows = append(rows, r)
	}
	for k, part := range [][]row{rows[:150], rows[150:]} {
		path := filepath.Join(dir, fmt.Sprintf("part-%d.parquet", k))
		if err := parquet.WriteFile(path, part, parquet.MaxRowsPerRowGroup(40)); err != nil {
			t.Fatal(err)
		}
	}
	return "parquet://" + dir + "?schema=y:label,a:num,b:num,d:cat,e:hash(50),g:cat(red|green|blue)"
}
