package onnx

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one decoded field: a varint, fixed32 or the bytes of a
// length-delimited one.
type field struct {
	num   protowire.Number
	v     uint64
	bytes []byte
}

// fields decodes one message level, failing the test on bad encoding.
func fields(t *testing.T, b []byte) []field {
	t.Helper()
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		out = append(out, f)
	}
	return out
}

// only returns the fields numbered num.
func only(fs []field, num protowire.Number) []field {
	var out []field
	for _, f := range fs {
		if f.num == num {
			out = append(out, f)
		}
	}
	return out
}

func TestAttrEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		attr Attr
		want []byte
	}{
		// name "a" (field 1), i=3 (field 3), type INT=2 (field 20: tag 0xa0 0x01).
		{"int", IntAttr("a", 3), []byte{0x0a, 1, 'a', 0x18, 3, 0xa0, 0x01, 2}},
		// f=1.0 as fixed32 (field 2), type FLOAT=1.
		{"float", FloatAttr("a", 1), []byte{0x0a, 1, 'a', 0x15, 0, 0, 0x80, 0x3f, 0xa0, 0x01, 1}},
		// s="x" (field 4), type STRING=3.
		{"string", StringAttr("a", "x"), []byte{0x0a, 1, 'a', 0x22, 1, 'x', 0xa0, 0x01, 3}},
		// ints 1, -1 (field 8; -1 as a 10-byte varint), type INTS=7.
		{"ints", IntsAttr("a", 1, -1), append(append([]byte{0x0a, 1, 'a', 0x40, 1, 0x40},
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), 0xa0, 0x01, 7)},
	} {
		if got := tc.attr.marshal(); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: % x, want % x", tc.name, got, tc.want)
		}
	}
}

func TestTensorEncoding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tensor   Tensor
		dims     []uint64
		typ      uint64
		raw      []float32
		int64s   []uint64
		noRawSet bool
	}{
		{"float matrix", Tensor{Name: "w", Dims: []int64{2, 1}, Floats: []float32{1.5, -2}}, []uint64{2, 1}, Float, []float32{1.5, -2}, nil, false},
		{"scalar", Tensor{Name: "s", Floats: []float32{3}}, nil, Float, []float32{3}, nil, false},
		{"int64", Tensor{Name: "i", Type: Int64, Dims: []int64{2}, Int64s: []int64{4, 5}}, []uint64{2}, Int64, nil, []uint64{4, 5}, true},
	} {
		fs := fields(t, tc.tensor.marshal())
		var dims []uint64
		for _, f := range only(fs, tensorDims) {
			dims = append(dims, f.v)
		}
		if !equalU(dims, tc.dims) {
			t.Errorf("%s: dims %v, want %v", tc.name, dims, tc.dims)
		}
		if ty := only(fs, tensorType); len(ty) != 1 || ty[0].v != tc.typ {
			t.Errorf("%s: data_type %v, want %d", tc.name, ty, tc.typ)
		}
		if nm := only(fs, tensorName); len(nm) != 1 || string(nm[0].bytes) != tc.tensor.Name {
			t.Errorf("%s: name %v", tc.name, nm)
		}
		raw := only(fs, tensorRaw)
		if tc.noRawSet != (len(raw) == 0) {
			t.Fatalf("%s: raw_data fields %d", tc.name, len(raw))
		}
		if len(raw) == 1 {
			var got []float32
			for i := 0; i+4 <= len(raw[0].bytes); i += 4 {
				got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(raw[0].bytes[i:])))
			}
			if len(got) != len(tc.raw) || (len(got) > 0 && got[0] != tc.raw[0]) || got[len(got)-1] != tc.raw[len(tc.raw)-1] {
				t.Errorf("%s: raw_data %v, want %v", tc.name, got, tc.raw)
			}
		}
		var ints []uint64
		for _, f := range only(fs, tensorI64) {
			ints = append(ints, f.v)
		}
		if !equalU(ints, tc.int64s) {
			t.Errorf("%s: int64_data %v, want %v", tc.name, ints, tc.int64s)
		}
	}
}

func equalU(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestValueDims: a negative dimension is written as dim_param, the others
// as dim_value, in order.
func TestValueDims(t *testing.T) {
	v := Value{Name: "x", Dims: []int64{-1, 28, 1}, DimParam: "batch"}
	fs := fields(t, v.marshal())
	if nm := only(fs, valueName); len(nm) != 1 || string(nm[0].bytes) != "x" {
		t.Fatalf("name %v", nm)
	}
	typ := fields(t, only(fs, valueType)[0].bytes)
	tt := fields(t, only(typ, typeTensor)[0].bytes)
	if e := only(tt, typeElem); len(e) != 1 || e[0].v != Float {
		t.Errorf("elem_type %v, want FLOAT (the zero Type's default)", e)
	}
	dims := only(fields(t, only(tt, typeShape)[0].bytes), shapeDim)
	if len(dims) != 3 {
		t.Fatalf("%d dims, want 3", len(dims))
	}
	for i, want := range []any{"batch", uint64(28), uint64(1)} {
		d := fields(t, dims[i].bytes)[0]
		switch w := want.(type) {
		case string:
			if d.num != dimParam || string(d.bytes) != w {
				t.Errorf("dim %d: %+v, want dim_param %q", i, d, w)
			}
		case uint64:
			if d.num != dimValue || d.v != w {
				t.Errorf("dim %d: %+v, want dim_value %d", i, d, w)
			}
		}
	}
}

// TestModelHeader: IR version, the graph, and one opset import of the
// default domain at Opset.
func TestModelHeader(t *testing.T) {
	m := Model{Producer: "elasticdl", Graph: Graph{Name: "g", Nodes: []Node{{Op: "Relu", Name: "r", Inputs: []string{"x"}, Outputs: []string{"y"}}}}}
	fs := fields(t, m.Marshal())
	if ir := only(fs, modelIRVersion); len(ir) != 1 || ir[0].v != IRVersion {
		t.Errorf("ir_version %v, want %d", ir, IRVersion)
	}
	ops := only(fs, modelOpsetImport)
	if len(ops) != 1 {
		t.Fatalf("%d opset imports, want 1", len(ops))
	}
	op := fields(t, ops[0].bytes)
	if v := only(op, opsetVersion); len(v) != 1 || v[0].v != Opset || len(only(op, opsetDomain)) != 0 {
		t.Errorf("opset import %+v, want the default domain at %d", op, Opset)
	}
	g := fields(t, only(fs, modelGraph)[0].bytes)
	node := fields(t, only(g, graphNode)[0].bytes)
	if ot := only(node, nodeOpType); len(ot) != 1 || string(ot[0].bytes) != "Relu" {
		t.Errorf("node op_type %v", ot)
	}
	if in := only(node, nodeInput); len(in) != 1 || string(in[0].bytes) != "x" {
		t.Errorf("node inputs %v", in)
	}
}

// TestImportsAndDomain: another domain is imported after the default one,
// and a node of it names it.
func TestImportsAndDomain(t *testing.T) {
	m := Model{Graph: Graph{Nodes: []Node{{Op: "LabelEncoder", Domain: MLDomain}}}, Imports: []OpsetImport{{Domain: MLDomain, Version: MLOpset}}}
	fs := fields(t, m.Marshal())
	ops := only(fs, modelOpsetImport)
	if len(ops) != 2 {
		t.Fatalf("%d opset imports, want 2", len(ops))
	}
	ml := fields(t, ops[1].bytes)
	if d, v := only(ml, opsetDomain), only(ml, opsetVersion); len(d) != 1 || string(d[0].bytes) != MLDomain || len(v) != 1 || v[0].v != MLOpset {
		t.Errorf("second import %+v, want %s at %d", ml, MLDomain, MLOpset)
	}
	node := fields(t, only(fields(t, only(fs, modelGraph)[0].bytes), graphNode)[0].bytes)
	if d := only(node, nodeDomain); len(d) != 1 || string(d[0].bytes) != MLDomain {
		t.Errorf("node domain %v, want %s", d, MLDomain)
	}
}
