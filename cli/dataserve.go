package cli

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"elasticdl/data"
)

// runDataServe is `elasticdl data serve --data=URI`: the Python SDK's
// reader of a source it has no reader of its own for (a database table's
// snapshot). The SDK starts it once per worker and source and asks for
// ranges on standard input, so a Python worker trains on the records a Go
// worker decodes, decoded in one place, and needs no database driver.
//
// It writes a JSON line {"records": N} first. Each request is a line
// "START END"; each reply a JSON line (dataReply) and, unless it holds an
// error, the batch's arrays in little-endian binary: features float32
// [n, shape...], labels int32 [n], index int64 [n], ids int64 [n,
// num_categorical]. A bad request gets an error reply and the next is
// read; end of input ends it.
func runDataServe(env Env, args []string) error {
	fs := newFlagSet(env, "data serve")
	uri := fs.String("data", "", "the source: any --training_data value")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *uri == "" {
		return usageError{errors.New("--data: required")}
	}
	src, err := data.Open(*uri)
	if err != nil {
		return err // it names the source; the SDK raises it as it is
	}
	defer src.Close()
	return serveData(src, env.stdin(), env.Stdout)
}

// dataReply heads each reply.
type dataReply struct {
	N              int         `json:"n"`
	FeatureShape   []int       `json:"feature_shape"`
	NumCategorical int         `json:"num_categorical"`
	Corrupt        [][2]string `json:"corrupt,omitempty"` // record, error
	Error          string      `json:"error,omitempty"`
}

func serveData(src data.Source, in io.Reader, out io.Writer) error {
	w := bufio.NewWriterSize(out, 1<<20)
	enc := json.NewEncoder(w)
	if err := enc.Encode(map[string]int64{"records": src.Len()}); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		b, err := readRange(src, sc.Text())
		if err != nil {
			err = enc.Encode(dataReply{Error: err.Error()})
		} else if err = enc.Encode(replyOf(b)); err == nil {
			_, err = w.Write(batchBytes(b))
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return fmt.Errorf("data serve: write: %w", err)
		}
	}
	return sc.Err()
}

func readRange(src data.Source, line string) (*data.Batch, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return nil, fmt.Errorf("request %q: want START END", line)
	}
	start, err1 := strconv.ParseInt(f[0], 10, 64)
	end, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("request %q: %w", line, err)
	}
	return src.Read(start, end)
}

func replyOf(b *data.Batch) dataReply {
	r := dataReply{N: b.N, FeatureShape: b.FeatureShape, NumCategorical: b.NumCategorical}
	for _, c := range b.Corrupt {
		r.Corrupt = append(r.Corrupt, [2]string{strconv.FormatInt(c.Record, 10), c.Error()})
	}
	return r
}

func batchBytes(b *data.Batch) []byte {
	buf := make([]byte, 0, 4*len(b.Features)+4*len(b.Labels)+8*len(b.Index)+8*len(b.Categorical))
	le := binary.LittleEndian
	for _, v := range b.Features {
		buf = le.AppendUint32(buf, math.Float32bits(v))
	}
	for _, v := range b.Labels {
		buf = le.AppendUint32(buf, uint32(v))
	}
	for _, v := range b.Index {
		buf = le.AppendUint64(buf, uint64(v))
	}
	for _, v := range b.Categorical {
		buf = le.AppendUint64(buf, uint64(v))
	}
	return buf
}
