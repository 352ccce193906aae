//go:build !race

package webpush_test

const raceDetector = false
