//go:build !race

package pushtest_test

const raceDetector = false
