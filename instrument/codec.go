package instrument

import "encoding/json"

// Codec encodes cached values. Implementations must be safe for concurrent
// use. Marshal receives the value, Unmarshal a pointer to the destination,
// as with encoding/json.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default Codec, encoding/json.
type JSONCodec struct{}

// Marshal encodes v as JSON.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON data into v, a pointer.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
