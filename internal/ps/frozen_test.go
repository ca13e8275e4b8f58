package ps

import (
	"context"
	"slices"
	"testing"

	"elasticdl/proto/pserverpb"
)

// TestFrozenTables: a predict or evaluate job's PS reads an id its tables
// lack as zeros and creates no row; ids it holds read as they are.
func TestFrozenTables(t *testing.T) {
	s, err := NewServer(Config{Index: 0, NumPS: 1, Optimizer: parseOpt(t, "sgd:learning_rate=0.1"), FrozenTables: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushModel(context.Background(), &pserverpb.Model{EmbeddingTableInfos: embInfos}); err != nil {
		t.Fatal(err)
	}
	// A push creates the row (a restored checkpoint holds it likewise).
	if err := pushSparse(s, slices1("user", 4, []int64{3}, []float32{1, 1, 1, 1})); err != nil {
		t.Fatal(err)
	}
	held := embServer(t, 0, 1, "sgd:learning_rate=0.1")
	if err := pushSparse(held, slices1("user", 4, []int64{3}, []float32{1, 1, 1, 1})); err != nil {
		t.Fatal(err)
	}
	got := pull(t, s, "user", 3, 9, 1<<40)
	if want := pull(t, held, "user", 3); !slices.Equal(got[:4], want) {
		t.Errorf("id 3: %v, want the row held %v", got[:4], want)
	}
	if !slices.Equal(got[4:], make([]float32, 8)) {
		t.Errorf("unseen ids 9 and 2^40: %v, want zeros", got[4:])
	}
	if rows := s.EmbeddingRows("user"); len(rows) != 1 {
		t.Errorf("table holds %d rows after the pull, want 1 (no row created)", len(rows))
	}
	if r := pull(t, held, "user", 9); slices.Equal(r, make([]float32, 4)) {
		t.Error("a training PS read unseen id 9 as zeros; want its initializer's row")
	}
}
