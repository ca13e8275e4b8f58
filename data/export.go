package data

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// ExportCSV writes records [start, end) of src as CSV without a header —
// the label, then the dense features (the shortest text that reads back as
// the same float32), then the categorical ids — and returns the schema that
// reads them back (label:label,f{1..N}:num,c{1..K}:id): OpenCSVSchema with
// it gives the very records src gives, corrupt ones left out (they are
// counted in the second result). This is how data that only a Go reader
// makes (synthetic-ctr://) reaches other readers, such as the Python SDK's.
func ExportCSV(w io.Writer, src Source, start, end int64) (schema string, corrupt int, err error) {
	if err := checkRange(src.Name(), start, end, src.Len()); err != nil {
		return "", 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	nf, nc := 0, 0
	const chunk = 4096
	var buf []byte
	for lo := start; lo < end; lo += chunk {
		b, err := src.Read(lo, min(lo+chunk, end))
		if err != nil {
			return "", corrupt, err
		}
		corrupt += len(b.Corrupt)
		if b.N == 0 {
			continue
		}
		nf, nc = len(b.Features)/b.N, b.NumCategorical
		for r := 0; r < b.N; r++ {
			buf = strconv.AppendInt(buf[:0], int64(b.Labels[r]), 10)
			for _, v := range b.Features[r*nf : (r+1)*nf] {
				buf = strconv.AppendFloat(append(buf, ','), float64(v), 'g', -1, 32)
			}
			for _, id := range b.Categorical[r*nc : (r+1)*nc] {
				buf = strconv.AppendInt(append(buf, ','), id, 10)
			}
			buf = append(buf, '\n')
			if _, err := bw.Write(buf); err != nil {
				return "", corrupt, fmt.Errorf("write: %w", err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return "", corrupt, fmt.Errorf("write: %w", err)
	}
	schema = "label:label"
	if nf > 0 {
		schema += fmt.Sprintf(",f{1..%d}:num", nf)
	}
	if nc > 0 {
		schema += fmt.Sprintf(",c{1..%d}:id", nc)
	}
	return schema, corrupt, nil
}
