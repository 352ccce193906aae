//go:build !unix

package server

// LockData does nothing where flock is not available.
func LockData(string) (func(), error) { return func() {}, nil }
