//go:build unix

package main

import "syscall"

// privateUmask makes every file and directory this process creates from now on private to
// its user (umask 077): the store's engines create files as they run (Pebble's tables and
// logs), and server.OpenStore only tightens the ones that exist when it opens them.
func privateUmask() { syscall.Umask(0o077) }
