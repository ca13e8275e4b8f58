package checkpoint

import (
	"slices"
	"strings"
	"testing"

	"elasticdl/internal/wire"
	"elasticdl/proto/pserverpb"
)

// table is shard index's rows of a dim-2 table: value (id, -id), slot m
// (10*id, 0), step id.
func table(ids []int64, slots bool) *pserverpb.EmbeddingTableCheckpoint {
	var vals, m []float32
	var steps []int64
	for _, id := range ids {
		vals = append(vals, float32(id), -float32(id))
		m = append(m, 10*float32(id), 0)
		steps = append(steps, id)
	}
	et := &pserverpb.EmbeddingTableCheckpoint{
		Info:   &pserverpb.EmbeddingTableInfo{Name: "emb", Dim: 2},
		Ids:    ids,
		Values: wire.EncodeTensor("emb", []int{len(ids), 2}, vals),
	}
	if slots {
		et.Steps = steps
		et.Slots = []*pserverpb.Tensor{wire.EncodeTensor("m", []int{len(ids), 2}, m)}
	}
	return et
}

func TestTablesRoundTripAndReshard(t *testing.T) {
	root := t.TempDir()
	parts := [][]int64{{0, 2, 4, 10}, {1, 3, 7}}
	for i, ids := range parts {
		c := &pserverpb.Checkpoint{Version: 5, Shard: int32(i), NumShards: 2, EmbeddingTables: []*pserverpb.EmbeddingTableCheckpoint{table(ids, true)}}
		if _, err := Write(root, c); err != nil {
			t.Fatal(err)
		}
	}
	set, err := Load(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	for numPS, want := range map[int][][]int64{1: {{0, 2, 4, 10, 1, 3, 7}}, 3: {{0, 3}, {4, 10, 1, 7}, {2}}} {
		for i := range numPS {
			c, err := set.ForShard(i, numPS)
			if err != nil {
				t.Fatal(err)
			}
			et := c.GetEmbeddingTables()[0]
			if !slices.Equal(et.GetIds(), want[i]) {
				t.Fatalf("%d PS, shard %d: ids %v, want %v", numPS, i, et.GetIds(), want[i])
			}
			exp := table(want[i], true)
			if !slices.Equal(et.GetValues().GetContent(), exp.GetValues().GetContent()) ||
				!slices.Equal(et.GetSteps(), exp.GetSteps()) ||
				!slices.Equal(et.GetSlots()[0].GetContent(), exp.GetSlots()[0].GetContent()) ||
				!slices.Equal(et.GetValues().GetDims(), []int64{int64(len(want[i])), 2}) {
				t.Fatalf("%d PS, shard %d: rows, steps or slots misplaced", numPS, i)
			}
			// What ForShard returns is itself a valid checkpoint.
			if err := check(c, 5, i, numPS); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestWriteRejectsBadTables(t *testing.T) {
	cases := map[string]*pserverpb.EmbeddingTableCheckpoint{
		"not of shard": table([]int64{1}, false),
		"negative":     table([]int64{-2}, false),
		"repeated":     table([]int64{2, 2}, false),
	}
	short := table([]int64{0, 2}, true)
	short.Steps = short.Steps[:1]
	cases["steps"] = short
	bad := table([]int64{0}, false)
	bad.Values.Dims = []int64{1, 3}
	cases["values"] = bad
	for want, et := range cases {
		c := &pserverpb.Checkpoint{Version: 1, Shard: 0, NumShards: 2, EmbeddingTables: []*pserverpb.EmbeddingTableCheckpoint{et}}
		if _, err := Write(t.TempDir(), c); err == nil || !strings.Contains(err.Error(), "emb") {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
