package worker

import (
	"reflect"
	"testing"
)

// A step log survives the float32 encoding the ring broadcasts it in, task
// IDs and step numbers past 2^24 included.
func TestLogRoundTrip(t *testing.T) {
	log := []loggedStep{
		{step: 1, parts: []contrib{{worker: 0, task: 7, start: 0, end: 64}, {worker: 3, task: 1<<30 + 5, start: 448, end: 512}}},
		{step: 1<<33 + 9, version: 1<<30 + 3, parts: []contrib{{worker: 12, task: 1 << 40, start: 64, end: 100}}},
		{step: 2},
	}
	got := decodeLog(encodeLog(log))
	if len(got) != len(log) {
		t.Fatalf("%d steps, want %d", len(got), len(log))
	}
	for i := range log {
		if got[i].step != log[i].step || (len(log[i].parts) > 0 && !reflect.DeepEqual(got[i].parts, log[i].parts)) || len(got[i].parts) != len(log[i].parts) {
			t.Errorf("step %d: %+v, want %+v", i, got[i], log[i])
		}
	}
	// A step buffer's tag slots: empty slots are skipped.
	buf := make([]float32, 3*tagLen)
	putTag(buf[2*tagLen:], contrib{worker: 4, task: 99, start: 8, end: 16})
	if tags := decodeTags(buf); len(tags) != 1 || tags[0] != (contrib{worker: 4, task: 99, start: 8, end: 16}) {
		t.Fatalf("tags %+v", tags)
	}
}
