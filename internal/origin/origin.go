// Package origin marks Redis commands sent by cachewatch's own instrumented
// client, so that a hook on the same go-redis client times them but does not
// count their lock and cache outcomes a second time (the client already
// counted them, with more knowledge than the wire shows).
package origin

import "context"

type key struct{}

// Instrumented returns ctx marked as carrying commands of cachewatch's
// instrumented client.
func Instrumented(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, true)
}

// IsInstrumented reports whether ctx was marked by Instrumented. It does not
// allocate.
func IsInstrumented(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
