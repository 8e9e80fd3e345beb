package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

// Writers and a reader at once (run with -race): every write is kept whole.
func TestBufferConcurrentWritesAndReads(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("ab\n"))
				_ = b.Len()
			}
		}()
	}
	for range 100 {
		_ = b.String()
	}
	wg.Wait()
	if got := strings.Count(b.String(), "ab\n"); got != 400 || b.Len() != 1200 {
		t.Fatalf("%d whole writes, %d bytes; want 400 and 1200", got, b.Len())
	}
}
