package otlplog

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

// Every attribute type is written as the AnyValue the official OTLP
// package decodes to the same value.
func TestAppendAttrsEveryType(t *testing.T) {
	long := strings.Repeat("x", 20000) // a 3-byte length prefix
	attrs := []attribute.KeyValue{
		attribute.Bool("bool", true),
		attribute.Bool("false", false),
		attribute.Int64("int", -42),
		attribute.Int64("zero", 0),
		attribute.Float64("float", 1.5),
		attribute.String("string", "a.example.com"),
		attribute.String("empty", ""),
		attribute.String("long", long),
		{Key: "bytes", Value: attribute.ByteSliceValue([]byte{0, 1, 255})},
		attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("ints", []int64{1, -2}),
		attribute.Float64Slice("floats", []float64{0.5}),
		attribute.StringSlice("strings", []string{"a", ""}),
		{Key: "slice", Value: attribute.SliceValue(attribute.StringValue("s"), attribute.Int64Value(9))},
		{Key: "map", Value: attribute.MapValue(attribute.String("k", "v"), attribute.Int64("n", 1))},
		{Key: "none", Value: attribute.Value{}},
	}
	b := appendAttrs(nil, fResAttributes, attrs)
	var got resourcepb.Resource
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatalf("official package cannot decode: %v", err)
	}
	arr := func(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	s := func(x string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	}
	i := func(x int64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: x}}
	}
	bo := func(x bool) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}}
	}
	d := func(x float64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	}
	kv := func(k string, v *commonpb.AnyValue) *commonpb.KeyValue { return &commonpb.KeyValue{Key: k, Value: v} }
	want := resourcepb.Resource{Attributes: []*commonpb.KeyValue{
		kv("bool", bo(true)),
		kv("false", bo(false)),
		kv("int", i(-42)),
		kv("zero", i(0)),
		kv("float", d(1.5)),
		kv("string", s("a.example.com")),
		kv("empty", s("")),
		kv("long", s(long)),
		kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 255}}}),
		kv("bools", arr(bo(true), bo(false))),
		kv("ints", arr(i(1), i(-2))),
		kv("floats", arr(d(0.5))),
		kv("strings", arr(s("a"), s(""))),
		kv("slice", arr(s("s"), i(9))),
		kv("map", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{
			kv("k", s("v")), kv("n", i(1)),
		}}}}),
		kv("none", &commonpb.AnyValue{}),
	}}
	if !proto.Equal(&got, &want) {
		t.Errorf("decoded\n%v\nwant\n%v", &got, &want)
	}
	// A oneof member with a zero value is still present.
	if _, ok := got.Attributes[3].GetValue().GetValue().(*commonpb.AnyValue_IntValue); !ok {
		t.Errorf("int 0 decoded as %T, want an int_value", got.Attributes[3].GetValue().GetValue())
	}
}

func TestParseResponse(t *testing.T) {
	for _, c := range []struct {
		resp *collogspb.ExportLogsServiceResponse
		want partialSuccess
	}{
		{&collogspb.ExportLogsServiceResponse{}, partialSuccess{}},
		{&collogspb.ExportLogsServiceResponse{PartialSuccess: &collogspb.ExportLogsPartialSuccess{RejectedLogRecords: 3, ErrorMessage: "too old"}},
			partialSuccess{rejected: 3, message: "too old"}},
		{&collogspb.ExportLogsServiceResponse{PartialSuccess: &collogspb.ExportLogsPartialSuccess{ErrorMessage: "warning only"}},
			partialSuccess{message: "warning only"}},
	} {
		b, err := proto.Marshal(c.resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := parseResponse(b); got != c.want {
			t.Errorf("parseResponse(%v) = %+v, want %+v", c.resp, got, c.want)
		}
	}
	if got := parseResponse([]byte{0xff, 0xff, 0xff}); got != (partialSuccess{}) {
		t.Errorf("garbage parsed as %+v", got)
	}
}
