package data

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkParquetVsCSV reads the same 100k Criteo-shaped records (13
// numbers, 26 ids) in tasks of 512, from a Parquet file (row groups of 64k)
// and from the CSV file ExportCSV writes, read with the schema it returns:
//
//	go test -run '^$' -bench ParquetVsCSV -benchtime 2s -cpu 1 ./data
func BenchmarkParquetVsCSV(b *testing.B) {
	const records, task = 100_000, 512
	src, err := Open("synthetic-ctr://?records=100000&dense=13&categorical=26&pairs=3&seed=1")
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dir := b.TempDir()
	pqPath := filepath.Join(dir, "ctr.parquet")
	exportParquetFile(b, src, 0, records, 0, pqPath)
	var out bytes.Buffer
	schema, _, err := ExportCSV(&out, src, 0, records)
	if err != nil {
		b.Fatal(err)
	}
	csvPath := filepath.Join(dir, "ctr.csv")
	if err := os.WriteFile(csvPath, out.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, uri string }{
		{"csv", "csv://" + csvPath + "?schema=" + schema},
		{"parquet", pqPath},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(tc.uri)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			lo := int64(0)
			for b.Loop() {
				if lo+task > records {
					lo = 0
				}
				if _, err := s.Read(lo, lo+task); err != nil {
					b.Fatal(err)
				}
				lo += task
			}
			b.ReportMetric(float64(b.N*task)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
