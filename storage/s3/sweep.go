package s3

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// sweep is the driver's storage.SweepFunc. On S3 the leftovers are
// .partial objects and multipart uploads never completed (billed, and
// invisible in the bucket listing).
func sweep(ctx context.Context, u *url.URL, cutoff time.Time, dryRun bool, creds storage.Credentials, rep *storage.SweepReport) error {
	bucket := u.Host
	if bucket == "" {
		return fmt.Errorf("sweep: %q has no bucket; write it as s3://bucket/prefix", storage.RedactURL(u.String()))
	}
	cfg, err := storage.CredentialsAs[*AWSConfig](creds)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if u.User != nil && cfg == nil {
		return fmt.Errorf("sweep: %s names connection %q; resolve it and pass its credentials", storage.RedactURL(u.String()), u.User.Username())
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	client, err := newClient(ctx, cfg, bucket)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	at := func(key string) string { return "s3://" + bucket + "/" + key }
	var failed []string

	pages := awss3.NewListObjectsV2Paginator(client, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("sweep: listing s3://%s/%s: %w", bucket, prefix, explainS3(err))
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if !storage.IsLeftoverPartial(path.Base(key)) || !aws.ToTime(o.LastModified).Before(cutoff) {
				continue
			}
			rep.Found = append(rep.Found, storage.Leftover{URL: at(key), Kind: storage.LeftoverPartial, Size: aws.ToInt64(o.Size), Since: aws.ToTime(o.LastModified).UTC()})
			if dryRun {
				continue
			}
			if _, err := client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key}); err != nil && !isNotFound(err) {
				failed = append(failed, fmt.Sprintf("%s (%v)", at(key), explainS3(err)))
				continue
			}
			rep.Removed = append(rep.Removed, at(key))
		}
	}

	in := &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
	for {
		out, err := client.ListMultipartUploads(ctx, in)
		if err != nil {
			return fmt.Errorf("sweep: listing unfinished multipart uploads in s3://%s/%s: %w", bucket, prefix, explainS3(err))
		}
		for _, up := range out.Uploads {
			key := aws.ToString(up.Key)
			if !aws.ToTime(up.Initiated).Before(cutoff) {
				continue
			}
			l := storage.Leftover{URL: at(key), Kind: storage.LeftoverMultipart, Size: -1, Since: aws.ToTime(up.Initiated).UTC(), UploadID: aws.ToString(up.UploadId)}
			rep.Found = append(rep.Found, l)
			if dryRun {
				continue
			}
			if _, err := client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: up.Key, UploadId: up.UploadId}); err != nil && !isNotFound(err) && apiCode(err) != "NoSuchUpload" {
				failed = append(failed, fmt.Sprintf("%s upload %s (%v)", at(key), l.UploadID, explainS3(err)))
				continue
			}
			rep.Removed = append(rep.Removed, at(key)+" (upload "+l.UploadID+")")
		}
		if !aws.ToBool(out.IsTruncated) {
			return storage.SweepFailed(failed)
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
