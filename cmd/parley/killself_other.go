//go:build !unix

package main

import "os"

// killSelf ends the process at once, as near a crash as the platform allows.
func killSelf() { os.Exit(137) }
