// Command mkbucket creates the bucket of the s3:// blob store URL it is given, unless it
// exists, for setting up a test server (.ci/seaweedfs) or a new deployment:
//
//	go run ./internal/blob/s3/mkbucket 's3://parley-test?endpoint=http://127.0.0.1:8333&path_style=true&credentials_file=/path'
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/parleychat/parley/internal/blob/blobopen"
	"github.com/parleychat/parley/internal/blob/s3"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkbucket s3://bucket[/prefix][?endpoint=...&region=...&path_style=...&credentials_file=...]")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "mkbucket:", err)
		os.Exit(1)
	}
}

func run(url string) error {
	opts, err := blobopen.ParseS3(url)
	if err != nil {
		return err
	}
	s, err := s3.Open(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.CreateBucket(ctx)
}
