package sqlflow

import (
	"strings"
	"testing"
)

func TestTranslate(t *testing.T) {
	known := map[string][]string{
		"train":      {"num_epochs", "num_workers", "minibatch_size", "optimizer", "learning_rate"},
		"validation": {"metrics"},
	}
	cases := []struct {
		with   string
		flags  string
		params string
		err    string
	}{
		{"", "", "", ""},
		{"model.embedding_dim = 8, train.epoch = 2, train.num_workers = 4", "--num_epochs=2 --num_workers=4", "embedding_dim=8", ""},
		{"MODEL.Fields = 62, model.dense = 23", "", "fields=62; dense=23", ""},
		{"validation.metrics = 'AUC,Accuracy', train.optimizer = adam, train.learning_rate = -0.5", "--metrics=AUC,Accuracy --optimizer=adam --learning_rate=-0.5", "", ""},
		{"model.hidden = [64, 32]", "", "hidden=64,32", ""},
		{"train.num_epochs = 3", "--num_epochs=3", "", ""},
		{"train.epochs = 2", "", "", "line 1, column 33: unknown attribute train.epochs: known are model.* (the model's parameters), train.epoch, train.learning_rate, train.minibatch_size, train.num_workers, train.optimizer, validation.metrics"},
		{"validation.num_workers = 2", "", "", "unknown attribute validation.num_workers"},
		{"epoch = 2", "", "", "unknown attribute epoch"},
		{"model. = 2", "", "", "expected a name after '.', found ="},
		{"model.x = NUMERIC(a, 1)", "", "", "line 1, column 43: NUMERIC(…) is not a value"},
		{"model.x = [[1], 2]", "", "", "a list holds numbers, strings or names, not 1"},
	}
	for _, c := range cases {
		t.Run(c.with, func(t *testing.T) {
			src := "SELECT * FROM t TO TRAIN m "
			if c.with != "" {
				src += "WITH " + c.with + " "
			}
			stmts, err := Parse(src + "LABEL y INTO m")
			var s Settings
			if err == nil {
				s, err = Translate(stmts[0].(*Train).Attrs, known)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || strings.Join(s.Flags, " ") != c.flags || s.ModelParams != c.params {
				t.Errorf("got %q %q %v, want %q %q", s.Flags, s.ModelParams, err, c.flags, c.params)
			}
		})
	}
}

// FuzzParse: no input makes Parse panic, and an error always has a
// position inside the source.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"SELECT 1;", "SELECT * FROM t TO TRAIN m WITH a=[1,2] COLUMN E(C(a,1),2) FOR x LABEL y INTO OR REPLACE m",
		"SELECT 'a''b' TO PREDICT a.b USING m", "/* x */ SELECT `q` TO EVALUATE m INTO r", "SELECT 1 -- c\n; #x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, err := Parse(src)
		if e, ok := err.(*Error); ok && (e.Pos.Offset < 0 || e.Pos.Offset > len(src) || e.Pos.Line < 1 || e.Pos.Col < 1) {
			t.Fatalf("error %v at %+v outside the source of %d bytes", e, e.Pos, len(src))
		}
	})
}
