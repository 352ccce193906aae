package blob_test

import (
	"fmt"

	"github.com/parleychat/parley/internal/blob"
)

func ExampleCheckKey() {
	for _, key := range []string{"a/a_0123456789abcdefghijklmnop", "t/x.jpg", "/a", "a/../b", "a/.tmp", "A"} {
		fmt.Printf("%q: %v\n", key, blob.CheckKey(key) == nil)
	}
	// Output:
	// "a/a_0123456789abcdefghijklmnop": true
	// "t/x.jpg": true
	// "/a": false
	// "a/../b": false
	// "a/.tmp": false
	// "A": false
}
