package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

func frames(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for i := range n {
		var m eventstream.Message
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		m.Payload = bytes.Repeat([]byte{'x'}, 10*i+3)
		if err := enc.Encode(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// The check must tell a body that ends between messages from one that
// ends inside one or whose connection dropped, however the reads split it.
func TestFrameCheck(t *testing.T) {
	whole := frames(t, 3)
	first := len(frames(t, 1))
	for _, c := range []struct {
		name string
		body func() io.Reader
		want error
	}{
		{"whole messages", func() io.Reader { return bytes.NewReader(whole) }, io.EOF},
		{"ends inside a message", func() io.Reader { return bytes.NewReader(whole[:len(whole)-5]) }, ErrEventStreamCut},
		{"ends inside a length prefix", func() io.Reader { return bytes.NewReader(whole[:first+2]) }, ErrEventStreamCut},
		{"connection dropped between messages", func() io.Reader {
			return io.MultiReader(bytes.NewReader(whole[:first]), iotest.ErrReader(io.ErrUnexpectedEOF))
		}, ErrEventStreamCut},
		{"other errors pass", func() io.Reader { return io.MultiReader(bytes.NewReader(whole), iotest.ErrReader(errors.New("reset"))) }, nil},
	} {
		for _, split := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader, func(r io.Reader) io.Reader { return r }} {
			f := &frameCheck{body: io.NopCloser(split(c.body()))}
			_, err := io.ReadAll(f)
			if err == nil {
				err = io.EOF // ReadAll swallows it
			}
			switch {
			case c.want == nil:
				if err == io.EOF || errors.Is(err, ErrEventStreamCut) || err.Error() != "reset" {
					t.Errorf("%s: got %v, want the body's own error", c.name, err)
				}
			case err != c.want:
				t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			}
		}
	}
}

// Every place a body can end: the check reports a cut exactly when the end
// is not between two messages.
func TestFrameCheckEveryCut(t *testing.T) {
	var whole []byte
	boundary := map[int]bool{0: true}
	for i := range 4 {
		whole = append(whole, frames(t, i+1)[len(frames(t, i)):]...)
		boundary[len(whole)] = true
	}
	for end := 0; end <= len(whole); end++ {
		f := &frameCheck{body: io.NopCloser(iotest.HalfReader(bytes.NewReader(whole[:end])))}
		_, err := io.ReadAll(f)
		if cut := errors.Is(err, ErrEventStreamCut); cut == boundary[end] {
			t.Fatalf("body of %d of %d bytes (a message boundary: %v): got %v", end, len(whole), boundary[end], err)
		}
	}
}
