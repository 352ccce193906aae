//go:build !linux

package bench

import "errors"

// postgresCPU is measured from /proc, which only Linux has.
func postgresCPU() (float64, error) {
	return 0, errors.New("PostgreSQL's CPU is read from /proc, which this system lacks")
}

// natsCPU is measured from /proc, which only Linux has.
func natsCPU() (float64, error) {
	return 0, errors.New("the NATS server's CPU is read from /proc, which this system lacks")
}
