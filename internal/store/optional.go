package store

import "context"

// The capabilities below are what some stores have and others lack. A caller asks for one
// with a type assertion on the Store it holds, so that it depends on the capability and not
// on a backend's package.

// SecretKeeper is a store that keeps the node's secrets (token signing key, direct-id key,
// admin secret) itself: a database several nodes share, so that they all use the same ones.
// An embedded store lacks it; its node keeps them as files in its data directory.
type SecretKeeper interface {
	// Secret returns the secret stored under name, storing create's answer first when there
	// is none; nodes started together all get the one stored first. created reports that
	// this call stored it.
	Secret(ctx context.Context, name string, create func() (string, error)) (secret string, created bool, err error)
}
