// Package onnx writes ONNX models: the subset of onnx.proto's ModelProto
// that an exported network needs (a graph of nodes with attributes,
// float32 initializers as raw_data, typed inputs and outputs with a
// dynamic batch dimension, one opset import), hand-encoded with protowire
// from ONNX's public field numbers. Nothing is generated or vendored: the
// subset is small and stable (ONNX never renumbers fields), and a writer
// needs no reader.
package onnx

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// IRVersion is the ONNX IR version written: 8, the one that goes with
// opset 17 (ONNX 1.12, Debian's python3-onnx).
const IRVersion = 8

// Opset is the default-domain operator set version written.
const Opset = 17

// Data types (TensorProto.DataType).
const (
	Float = 1
	Int32 = 6
	Int64 = 7
	Bool  = 9
)

// Model is a ModelProto: one graph and its producer. The default domain
// is imported at Opset; Imports adds others (e.g. ai.onnx.ml).
type Model struct {
	Producer, ProducerVersion string
	Doc                       string
	Graph                     Graph
	Imports                   []OpsetImport
}

// OpsetImport is an OperatorSetIdProto: a domain at a version.
type OpsetImport struct {
	Domain  string
	Version int64
}

// MLDomain is the domain of ONNX's classical-ML operators (LabelEncoder),
// at MLOpset, the version that goes with Opset 17.
const (
	MLDomain = "ai.onnx.ml"
	MLOpset  = 3
)

// Graph is a GraphProto.
type Graph struct {
	Name         string
	Nodes        []Node
	Initializers []Tensor
	Inputs       []Value
	Outputs      []Value
}

// Node is a NodeProto; an empty Domain is the default one.
type Node struct {
	Op, Name        string
	Domain          string
	Inputs, Outputs []string
	Attrs           []Attr
}

// Attr is an AttributeProto holding one int, float, string, or a list of
// ints (exactly one of them is meant; Kind says which).
type Attr struct {
	Name  string
	Kind  AttrKind
	Int   int64
	Float float32
	Str   string
	Ints  []int64
}

// AttrKind is AttributeProto.AttributeType.
type AttrKind int

// Attribute kinds.
const (
	AttrFloat  AttrKind = 1
	AttrInt    AttrKind = 2
	AttrString AttrKind = 3
	AttrInts   AttrKind = 7
)

// IntAttr, FloatAttr, StringAttr and IntsAttr make attributes.
func IntAttr(name string, v int64) Attr     { return Attr{Name: name, Kind: AttrInt, Int: v} }
func FloatAttr(name string, v float32) Attr { return Attr{Name: name, Kind: AttrFloat, Float: v} }
func StringAttr(name string, v string) Attr { return Attr{Name: name, Kind: AttrString, Str: v} }
func IntsAttr(name string, v ...int64) Attr { return Attr{Name: name, Kind: AttrInts, Ints: v} }

// Tensor is a TensorProto: float32 data (written as raw_data, little
// endian) or int64 data.
type Tensor struct {
	Name   string
	Dims   []int64
	Floats []float32
	Int64s []int64
	// Type is Float or Int64; zero means Float.
	Type int32
}

// Value is a ValueInfoProto of a tensor type (zero Type: Float): a
// dimension < 0 is dynamic and named by DimParam (e.g. "batch").
type Value struct {
	Name     string
	Type     int32
	Dims     []int64
	DimParam string
}

// Field numbers of onnx.proto (ONNX's public, stable numbering).
const (
	modelIRVersion       = 1
	modelProducerName    = 2
	modelProducerVersion = 3
	modelDocString       = 6
	modelGraph           = 7
	modelOpsetImport     = 8

	opsetDomain  = 1
	opsetVersion = 2

	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12

	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	nodeDomain    = 7

	attrName   = 1
	attrF      = 2
	attrI      = 3
	attrS      = 4
	attrInts   = 8
	attrType   = 20
	tensorDims = 1
	tensorType = 2
	tensorI64  = 7
	tensorName = 8
	tensorRaw  = 9

	valueName  = 1
	valueType  = 2
	typeTensor = 1
	typeElem   = 1
	typeShape  = 2
	shapeDim   = 1
	dimValue   = 1
	dimParam   = 2
)

// Marshal encodes m as an ONNX ModelProto at IRVersion and Opset.
func (m Model) Marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, modelIRVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, IRVersion)
	b = appendString(b, modelProducerName, m.Producer)
	b = appendString(b, modelProducerVersion, m.ProducerVersion)
	b = appendString(b, modelDocString, m.Doc)
	b = appendMessage(b, modelGraph, m.Graph.marshal())
	for _, imp := range append([]OpsetImport{{Version: Opset}}, m.Imports...) {
		var op []byte
		op = appendString(op, opsetDomain, imp.Domain)
		op = protowire.AppendTag(op, opsetVersion, protowire.VarintType)
		op = protowire.AppendVarint(op, uint64(imp.Version))
		b = appendMessage(b, modelOpsetImport, op)
	}
	return b
}

func (g Graph) marshal() []byte {
	var b []byte
	for _, n := range g.Nodes {
		b = appendMessage(b, graphNode, n.marshal())
	}
	b = appendString(b, graphName, g.Name)
	for _, t := range g.Initializers {
		b = appendMessage(b, graphInitializer, t.marshal())
	}
	for _, v := range g.Inputs {
		b = appendMessage(b, graphInput, v.marshal())
	}
	for _, v := range g.Outputs {
		b = appendMessage(b, graphOutput, v.marshal())
	}
	return b
}

func (n Node) marshal() []byte {
	var b []byte
	for _, s := range n.Inputs {
		b = appendField(b, nodeInput, s)
	}
	for _, s := range n.Outputs {
		b = appendField(b, nodeOutput, s)
	}
	b = appendString(b, nodeName, n.Name)
	b = appendString(b, nodeOpType, n.Op)
	for _, a := range n.Attrs {
		b = appendMessage(b, nodeAttribute, a.marshal())
	}
	return appendString(b, nodeDomain, n.Domain)
}

func (a Attr) marshal() []byte {
	b := appendString(nil, attrName, a.Name)
	switch a.Kind {
	case AttrFloat:
		b = protowire.AppendTag(b, attrF, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.Float))
	case AttrInt:
		b = protowire.AppendTag(b, attrI, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.Int))
	case AttrString:
		b = appendField(b, attrS, a.Str)
	case AttrInts:
		for _, v := range a.Ints {
			b = protowire.AppendTag(b, attrInts, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		}
	}
	b = protowire.AppendTag(b, attrType, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(a.Kind))
}

func (t Tensor) marshal() []byte {
	var b []byte
	for _, d := range t.Dims {
		b = protowire.AppendTag(b, tensorDims, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	typ := t.Type
	if typ == 0 {
		typ = Float
	}
	b = protowire.AppendTag(b, tensorType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(typ))
	for _, v := range t.Int64s {
		b = protowire.AppendTag(b, tensorI64, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v))
	}
	b = appendString(b, tensorName, t.Name)
	if typ == Float {
		raw := make([]byte, 4*len(t.Floats))
		for i, v := range t.Floats {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		b = protowire.AppendTag(b, tensorRaw, protowire.BytesType)
		b = protowire.AppendBytes(b, raw)
	}
	return b
}

func (v Value) marshal() []byte {
	var shape []byte
	for _, d := range v.Dims {
		var dim []byte
		if d < 0 {
			dim = appendField(dim, dimParam, v.DimParam)
		} else {
			dim = protowire.AppendTag(dim, dimValue, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d))
		}
		shape = appendMessage(shape, shapeDim, dim)
	}
	typ := v.Type
	if typ == 0 {
		typ = Float
	}
	var tt []byte
	tt = protowire.AppendTag(tt, typeElem, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(typ))
	tt = appendMessage(tt, typeShape, shape)
	b := appendString(nil, valueName, v.Name)
	return appendMessage(b, valueType, appendMessage(nil, typeTensor, tt))
}

// appendString appends a string field, leaving an empty one out (proto2
// optional: absent and empty read the same for these fields).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendField(b, num, s)
}

// appendField appends a string field even when empty (a repeated one's
// empty entry, e.g. a node's omitted optional input, is meaningful).
func appendField(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}
