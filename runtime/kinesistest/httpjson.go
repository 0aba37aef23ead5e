package kinesistest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
)

// The HTTP front's JSON: the awsJson1_1 protocol's mapping of the SDK's
// input and output structs (members by their Go names, blobs in base64,
// timestamps in epoch seconds), by reflection, with a hand-written path
// for GetRecords answers.

var (
	timeType     = reflect.TypeFor[time.Time]()
	metadataType = reflect.TypeFor[middleware.Metadata]()
)

// decodeInput fills the SDK input struct in from a request body.
func decodeInput(body []byte, in any) error {
	if len(body) == 0 {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.UseNumber()
	var j any
	if err := d.Decode(&j); err != nil {
		return err
	}
	return assign(reflect.ValueOf(in).Elem(), j, "")
}

func assign(v reflect.Value, j any, path string) error {
	if j == nil {
		return nil
	}
	bad := func() error { return fmt.Errorf("%s: cannot take %T for %s", path, j, v.Type()) }
	switch v.Kind() {
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		if err := assign(e.Elem(), j, path); err != nil {
			return err
		}
		v.Set(e)
	case reflect.String:
		s, ok := j.(string)
		if !ok {
			return bad()
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := j.(bool)
		if !ok {
			return bad()
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, ok := j.(json.Number)
		if !ok {
			return bad()
		}
		i, err := n.Int64()
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		n, ok := j.(json.Number)
		if !ok {
			return bad()
		}
		f, err := n.Float64()
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		v.SetFloat(f)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			s, ok := j.(string)
			if !ok {
				return bad()
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			v.SetBytes(b)
			return nil
		}
		a, ok := j.([]any)
		if !ok {
			return bad()
		}
		s := reflect.MakeSlice(v.Type(), len(a), len(a))
		for i := range a {
			if err := assign(s.Index(i), a[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
	case reflect.Map:
		m, ok := j.(map[string]any)
		if !ok || v.Type().Key().Kind() != reflect.String {
			return bad()
		}
		out := reflect.MakeMapWithSize(v.Type(), len(m))
		for k, x := range m {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := assign(e, x, path+"."+k); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(out)
	case reflect.Struct:
		if v.Type() == timeType {
			n, ok := j.(json.Number)
			if !ok {
				return bad()
			}
			f, err := n.Float64()
			if err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			sec, frac := math.Modf(f)
			v.Set(reflect.ValueOf(time.Unix(int64(sec), int64(math.Round(frac*1e3))*int64(time.Millisecond)).UTC()))
			return nil
		}
		m, ok := j.(map[string]any)
		if !ok {
			return bad()
		}
		for k, x := range m {
			f := v.FieldByName(k)
			if !f.IsValid() || !f.CanSet() {
				continue // unknown members are ignored, as the service does
			}
			if err := assign(f, x, path+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeOutput writes an SDK output struct as the service's JSON.
func encodeOutput(b []byte, out any) []byte {
	if g, ok := out.(*kinesis.GetRecordsOutput); ok {
		return appendGetRecords(b, g)
	}
	return appendValue(b, reflect.ValueOf(out))
}

func appendValue(b []byte, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(b, "null"...)
		}
		return appendValue(b, v.Elem())
	case reflect.String:
		return appendJSONString(b, v.String())
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v.Bytes())
			return append(b, '"')
		}
		b = append(b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, v.Index(i))
		}
		return append(b, ']')
	case reflect.Map:
		b = append(b, '{')
		for i, it := 0, v.MapRange(); it.Next(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, it.Key().String())
			b = append(b, ':')
			b = appendValue(b, it.Value())
		}
		return append(b, '}')
	case reflect.Struct:
		if v.Type() == timeType {
			return appendTime(b, v.Interface().(time.Time))
		}
		b = append(b, '{')
		n := 0
		for i := 0; i < v.NumField(); i++ {
			f, sf := v.Field(i), v.Type().Field(i)
			if !sf.IsExported() || sf.Type == metadataType || omit(f) {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = appendJSONString(b, sf.Name)
			b = append(b, ':')
			b = appendValue(b, f)
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

// omit reports a member the service would leave out: absent (nil) or an
// unset enum.
func omit(f reflect.Value) bool {
	switch f.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map:
		return f.IsNil()
	case reflect.Slice:
		return f.IsNil() && f.Type().Elem().Kind() != reflect.Uint8
	case reflect.String:
		return f.Len() == 0
	}
	return false
}

// appendTime writes epoch seconds with milliseconds, as the service does.
func appendTime(b []byte, t time.Time) []byte {
	return strconv.AppendFloat(b, float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// appendGetRecords is GetRecords' answer without reflection: it is the
// polling path the fan-out benchmarks compare with.
func appendGetRecords(b []byte, g *kinesis.GetRecordsOutput) []byte {
	b = append(b, `{"Records":[`...)
	for i := range g.Records {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRecord(b, &g.Records[i])
	}
	b = append(b, ']')
	if g.MillisBehindLatest != nil {
		b = append(b, `,"MillisBehindLatest":`...)
		b = strconv.AppendInt(b, *g.MillisBehindLatest, 10)
	}
	if g.NextShardIterator != nil {
		b = append(b, `,"NextShardIterator":`...)
		b = appendJSONString(b, *g.NextShardIterator)
	}
	if g.ChildShards != nil {
		b = append(b, `,"ChildShards":`...)
		b = appendValue(b, reflect.ValueOf(g.ChildShards))
	}
	return append(b, '}')
}

func appendRecord(b []byte, r *types.Record) []byte {
	b = append(b, `{"SequenceNumber":`...)
	b = appendJSONString(b, *r.SequenceNumber)
	if r.ApproximateArrivalTimestamp != nil {
		b = append(b, `,"ApproximateArrivalTimestamp":`...)
		b = appendTime(b, *r.ApproximateArrivalTimestamp)
	}
	b = append(b, `,"Data":"`...)
	b = base64.StdEncoding.AppendEncode(b, r.Data)
	b = append(b, `","PartitionKey":`...)
	b = appendJSONString(b, *r.PartitionKey)
	if r.EncryptionType != "" {
		b = append(b, `,"EncryptionType":`...)
		b = appendJSONString(b, string(r.EncryptionType))
	}
	return append(b, '}')
}
