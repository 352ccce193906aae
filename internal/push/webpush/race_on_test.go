//go:build race

package webpush_test

// raceDetector scales the concurrency tests down: the race detector makes each push's
// crypto and goroutine many times slower, and the point is then races, not speed.
const raceDetector = true
