// Package e2e holds Parley's black-box end-to-end tests: each test starts a real node with
// parleytest.Start and talks to it only over HTTP and WebSocket, the way a client would. The
// tests decode every answer into generic JSON (map[string]any), never into the server's own
// Go types, so that field names, status codes and event order are checked against
// docs/protocol.md itself rather than against the implementation.
//
// The package has no non-test code; run it with
//
//	go test -race -count=1 ./internal/e2e/
package e2e
