package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto and tensor.proto (the same in
// tensorboard/compat/proto), for the fields read or written here.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary

	summaryValue = 1 // repeated Summary.Value

	valueTag         = 1 // string
	valueSimpleValue = 2 // float
	valueTensor      = 8 // TensorProto: TF2's tf.summary.scalar

	tensorDType   = 1 // DataType enum
	tensorContent = 4 // bytes, little-endian values
	tensorFloat   = 5 // repeated float (packed)
	tensorDouble  = 6 // repeated double (packed)

	dtFloat  = 1 // DataType DT_FLOAT
	dtDouble = 2 // DataType DT_DOUBLE
)

// FileVersion is what the first event of every event file says.
const FileVersion = "brain.Event:2"

// Event is the part of tensorflow.Event this package knows: the header
// event (FileVersion set) or a summary of scalar values.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string
	// Values are the summary's scalars. Written as simple_value (float32,
	// TensorBoard's scalar type); read from simple_value or from a rank-0
	// float or double tensor (what TF2's tf.summary.scalar writes).
	// Values of other kinds (images, histograms) are skipped on reading.
	Values []Value
}

// Value is one tagged scalar of a summary.
type Value struct {
	Tag   string
	Value float64
}

// Marshal encodes e as a tensorflow.Event, fields in number order (as
// protobuf's own encoders do), zero scalars left out (proto3).
func (e Event) Marshal() []byte {
	var b []byte
	if e.WallTime != 0 {
		b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(e.WallTime))
	}
	if e.Step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, e.FileVersion)
	}
	if len(e.Values) > 0 {
		var s []byte
		for _, v := range e.Values {
			var vb []byte
			vb = protowire.AppendTag(vb, valueTag, protowire.BytesType)
			vb = protowire.AppendString(vb, v.Tag)
			vb = protowire.AppendTag(vb, valueSimpleValue, protowire.Fixed32Type)
			vb = protowire.AppendFixed32(vb, math.Float32bits(float32(v.Value)))
			s = protowire.AppendTag(s, summaryValue, protowire.BytesType)
			s = protowire.AppendBytes(s, vb)
		}
		b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
		b = protowire.AppendBytes(b, s)
	}
	return b
}

// errProto wraps every decoding error.
var errProto = errors.New("malformed Event proto")

// ParseEvent decodes a tensorflow.Event; fields it does not know are
// skipped, as protobuf's decoders do.
func ParseEvent(b []byte) (Event, error) {
	var e Event
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			e.WallTime = math.Float64frombits(x)
		case num == eventStep && typ == protowire.VarintType:
			e.Step = int64(x)
		case num == eventFileVersion && typ == protowire.BytesType:
			e.FileVersion = string(v)
		case num == eventSummary && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != summaryValue || typ != protowire.BytesType {
					return nil
				}
				val, ok, err := parseValue(v)
				if ok {
					e.Values = append(e.Values, val)
				}
				return err
			})
		}
		return nil
	})
	return e, err
}

// parseValue decodes a Summary.Value; ok is false for a non-scalar.
func parseValue(b []byte) (val Value, ok bool, err error) {
	err = walk(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == valueTag && typ == protowire.BytesType:
			val.Tag = string(v)
		case num == valueSimpleValue && typ == protowire.Fixed32Type:
			val.Value, ok = float64(math.Float32frombits(uint32(x))), true
		case num == valueTensor && typ == protowire.BytesType:
			var err error
			val.Value, ok, err = parseScalarTensor(v)
			return err
		}
		return nil
	})
	return val, ok, err
}

// parseScalarTensor decodes a TensorProto holding one float or double.
func parseScalarTensor(b []byte) (float64, bool, error) {
	var dtype uint64
	var content, floats, doubles []byte
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == tensorDType && typ == protowire.VarintType:
			dtype = x
		case num == tensorContent && typ == protowire.BytesType:
			content = v
		case num == tensorFloat && typ == protowire.BytesType:
			floats = v
		case num == tensorDouble && typ == protowire.BytesType:
			doubles = v
		case num == tensorFloat && typ == protowire.Fixed32Type:
			floats = binary.LittleEndian.AppendUint32(nil, uint32(x))
		case num == tensorDouble && typ == protowire.Fixed64Type:
			doubles = binary.LittleEndian.AppendUint64(nil, x)
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, false, err
	case dtype == dtFloat && len(content) == 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(content))), true, nil
	case dtype == dtFloat && len(floats) == 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(floats))), true, nil
	case dtype == dtDouble && len(content) == 8:
		return math.Float64frombits(binary.LittleEndian.Uint64(content)), true, nil
	case dtype == dtDouble && len(doubles) == 8:
		return math.Float64frombits(binary.LittleEndian.Uint64(doubles)), true, nil
	}
	return 0, false, nil
}

// walk calls f for each field of the message b: v holds a length-delimited
// field's bytes, x a varint or fixed field's value.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: tag: %w", errProto, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", errProto, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
