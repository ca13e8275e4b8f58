package data

// CategoricalSource is a Source whose records carry categorical ids besides
// their dense features: its batches have NumCategorical ids per record in
// Batch.Categorical.
//
// The ids of all fields share one id space, so that a single embedding
// table can serve every field; how a source keeps fields apart is part of
// its documentation (SchemaCSV hashes or offsets each column, SyntheticCTR
// offsets field f by f*Vocab).
type CategoricalSource interface {
	Source
	// NumCategorical is the number of ids per record (one per field).
	NumCategorical() int
	// IDBound bounds the ids: all are in [0, IDBound()). It is 0 when the
	// ids are unbounded 63-bit hashes (SchemaCSV's "cat" columns), which
	// need a hash-keyed embedding rather than a table of IDBound rows.
	IDBound() int64
}

// Swap exchanges records i and j of the batch: features, label, index and
// categorical ids, so that shuffling a batch keeps each record whole.
func (b *Batch) Swap(i, j int) {
	if i == j {
		return
	}
	if b.N > 0 {
		swapRows(b.Features, len(b.Features)/b.N, i, j)
	}
	swapRows(b.Categorical, b.NumCategorical, i, j)
	b.Labels[i], b.Labels[j] = b.Labels[j], b.Labels[i]
	if len(b.Index) == b.N {
		b.Index[i], b.Index[j] = b.Index[j], b.Index[i]
	}
}

func swapRows[T any](s []T, width, i, j int) {
	if width == 0 || len(s) == 0 {
		return
	}
	ri, rj := s[i*width:(i+1)*width], s[j*width:(j+1)*width]
	for k := range ri {
		ri[k], rj[k] = rj[k], ri[k]
	}
}
