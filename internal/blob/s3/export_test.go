package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Uploads returns the keys of the multipart uploads in progress under the store's prefix.
func (s *Store) Uploads(ctx context.Context) ([]string, error) {
	out, err := s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix),
	})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys, nil
}

// DeleteAll removes every object under the store's prefix.
func (s *Store) DeleteAll(ctx context.Context) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, obj := range page.Contents {
			if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: obj.Key}); err != nil {
				return err
			}
		}
	}
	return nil
}
