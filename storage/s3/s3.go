// Package s3 is the s3://bucket/key driver of package storage (S3 or any
// S3-compatible server: MinIO, versitygw, ...), on the AWS SDK with its
// full default credential chain. Importing this package registers the
// scheme (and its s3a:// spelling); a bundle that does not import it links
// none of the AWS SDK, whose credential chain (SSO, shared config, ...)
// costs every task start its package inits.
//
// Uploads are multipart uploads of storage.PartSize parts,
// storage.UploadConcurrency at a time; an export's are completed at Commit,
// so it lands its files without copying them.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/parts"
)

func init() {
	storage.Register(storage.Registration{
		Scheme: "s3", Forms: []string{"s3", "s3a"}, ConnTypes: []string{"aws", "s3"}, Open: Open,
		FromConnection: storage.Adapt(AWSFromConnection), Sweep: sweep,
	})
}

// s3Parts fix the memory an upload can use, whatever the object's size
// (see storage.PartSize).
var s3Parts = parts.Options{PartSize: storage.PartSize, Concurrency: storage.UploadConcurrency}

type s3Store struct {
	bucket string
	client *awss3.Client
}

// Open opens bucket with creds, an *AWSConfig (nil: the AWS SDK's
// default credential chain).
func Open(ctx context.Context, bucket string, creds storage.Credentials) (storage.Driver, error) {
	cfg, err := storage.CredentialsAs[*AWSConfig](creds)
	if err != nil {
		return nil, err
	}
	client, err := newClient(ctx, cfg, bucket)
	if err != nil {
		return nil, err
	}
	return &s3Store{bucket: bucket, client: client}, nil
}

// newClient builds a client from an aws connection, or from the default
// credential chain when cfg is nil or has no keys. A custom endpoint (MinIO,
// versitygw, ...) gets path-style addressing and checksums only when
// required, which is what S3-compatible servers support (multipart uploads
// still send CRC32s, see s3Target).
func newClient(ctx context.Context, cfg *AWSConfig, bucket string) (*awss3.Client, error) {
	var c AWSConfig
	if cfg != nil {
		c = *cfg
	}
	var loadOpts []func(*config.LoadOptions) error
	if c.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(c.Region))
	}
	if c.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w; check AWS_* environment variables and ~/.aws/config", err)
	}
	endpoint := c.EndpointURL
	if endpoint == "" && os.Getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") != "true" {
		// The SDK would apply these by itself, but we must know about them
		// to switch to path-style addressing.
		endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
		if endpoint == "" && awsCfg.BaseEndpoint != nil {
			endpoint = *awsCfg.BaseEndpoint // AWS_ENDPOINT_URL
		}
	}
	region := awsCfg.Region
	mk := func(region string) *awss3.Client {
		return awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
			o.Region = region
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
				o.UsePathStyle = true
				o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
				o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
			}
		})
	}
	switch {
	case region != "":
	case endpoint != "":
		region = "us-east-1" // S3-compatible servers rarely care; signing needs one
	default:
		// Real AWS with no region configured: ask S3 where the bucket is
		// rather than failing later with a redirect error.
		r, err := manager.GetBucketRegion(ctx, mk("us-east-1"), bucket)
		var nf interface{ BucketNotFound() }
		if errors.As(err, &nf) {
			return nil, storage.NoBucket(fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", bucket))
		}
		if err != nil {
			return nil, fmt.Errorf("no AWS region configured and finding the region of bucket %q failed (%v); set extra region_name on the aws connection or AWS_REGION", bucket, err)
		}
		region = r
	}
	return mk(region), nil
}

// Put stores a small object with one PutObject and a larger one as a
// multipart upload completed at once. A read error from r aborts the
// multipart upload, so nothing appears at key: S3 only shows an object once
// it is complete.
func (s *s3Store) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := parts.Stream(ctx, r, s.target(key), s3Parts, true)
	if err != nil {
		return explainS3(err)
	}
	if err := p.Commit(ctx); err != nil {
		_ = p.Abort(ctx)
		return explainS3(err)
	}
	return nil
}

// Upload sends every part of a multipart upload and leaves it open:
// CompleteMultipartUpload at Commit is one small request, so an export
// lands its files without copying them.
func (s *s3Store) Upload(ctx context.Context, key string, r io.Reader, _ int64) (storage.Pending, error) {
	p, err := parts.Stream(ctx, r, s.target(key), s3Parts, false)
	if err != nil {
		return nil, explainS3(err)
	}
	return explainedPending{p}, nil
}

// explainedPending adds S3 advice to a pending upload's errors.
type explainedPending struct{ p *parts.Pending }

func (e explainedPending) Commit(ctx context.Context) error { return explainS3(e.p.Commit(ctx)) }
func (e explainedPending) Abort(ctx context.Context) error  { return explainS3(e.p.Abort(ctx)) }

func (s *s3Store) target(key string) *s3Target { return &s3Target{s: s, key: key} }

// s3Target is one object's upload. Every part carries a CRC32, computed by
// the SDK and repeated at completion, on S3-compatible servers too, as
// aws-sdk's own uploader sends it: the server checks each part against it,
// and versitygw, given none, computes a software CRC-64 of every byte
// instead, which made a 1 GiB upload 0.9 of the SDK's speed on 2 cores.
type s3Target struct {
	s   *s3Store
	key string
	id  *string

	mu    sync.Mutex
	parts []types.CompletedPart
}

func (t *s3Target) PutWhole(ctx context.Context, data []byte) error {
	_, err := t.s.client.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:        aws.String(t.s.bucket),
		Key:           aws.String(t.key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/octet-stream"),
	})
	return err
}

func (t *s3Target) Begin(ctx context.Context) (parts.Upload, error) {
	in := &awss3.CreateMultipartUploadInput{
		Bucket:            aws.String(t.s.bucket),
		Key:               aws.String(t.key),
		ContentType:       aws.String("application/octet-stream"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	}
	out, err := t.s.client.CreateMultipartUpload(ctx, in)
	if err != nil {
		return nil, err
	}
	t.id = out.UploadId
	return t, nil
}

func (t *s3Target) Part(ctx context.Context, n int, data []byte) error {
	in := &awss3.UploadPartInput{
		Bucket:            aws.String(t.s.bucket),
		Key:               aws.String(t.key),
		UploadId:          t.id,
		PartNumber:        aws.Int32(int32(n)),
		Body:              bytes.NewReader(data),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	}
	out, err := t.s.client.UploadPart(ctx, in)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.parts) < n {
		t.parts = append(t.parts, types.CompletedPart{})
	}
	t.parts[n-1] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(n)), ChecksumCRC32: out.ChecksumCRC32}
	return nil
}

func (t *s3Target) Complete(ctx context.Context, n int) error {
	t.mu.Lock()
	done := t.parts
	t.mu.Unlock()
	if len(done) != n {
		return fmt.Errorf("multipart upload %s has %d of its %d parts", aws.ToString(t.id), len(done), n)
	}
	_, err := t.s.client.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket:          aws.String(t.s.bucket),
		Key:             aws.String(t.key),
		UploadId:        t.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	})
	return err
}

func (t *s3Target) Abort(ctx context.Context) error {
	_, err := t.s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
		Bucket: aws.String(t.s.bucket), Key: aws.String(t.key), UploadId: t.id,
	})
	if err != nil {
		return fmt.Errorf("aborting multipart upload %s: %w", aws.ToString(t.id), err)
	}
	return nil
}

func (s *s3Store) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	if isNotFound(err) {
		return storage.NoBucket(fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", s.bucket))
	}
	return explainS3(err)
}

func (s *s3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if isNoSuchBucket(err) {
			return nil, explainS3(err)
		}
		if isNotFound(err) {
			return nil, storage.ErrNotFound
		}
		return nil, explainS3(err)
	}
	return out.Body, nil
}

func (s *s3Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	switch {
	case err == nil:
		return true, nil
	case apiCode(err) == "NotFound" || apiCode(err) == "NoSuchKey":
		return false, nil
	}
	return false, explainS3(err)
}

func (s *s3Store) Remove(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil && !isNotFound(err) {
		return explainS3(err)
	}
	return nil
}

// List pages through ListObjectsV2 (1000 keys a page), stopping as soon
// as each has had enough. Unfinished multipart uploads are not in that
// listing, and keys ending in "/" (the console's folders) are skipped.
func (s *s3Store) List(ctx context.Context, prefix string, each func(storage.Object) bool) error {
	pages := awss3.NewListObjectsV2Paginator(s.client, &awss3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return explainS3(err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if strings.HasSuffix(key, "/") {
				continue
			}
			if !each(storage.Object{Key: key, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}) {
				return nil
			}
		}
	}
	return nil
}

func (s *s3Store) Close() error { return nil }

var _ storage.Lister = (*s3Store)(nil)

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isNoSuchBucket(err error) bool { return apiCode(err) == "NoSuchBucket" }

func isNotFound(err error) bool {
	switch apiCode(err) {
	case "NoSuchKey", "NotFound", "NoSuchBucket":
		return true
	}
	var nf *types.NoSuchKey
	return errors.As(err, &nf)
}

// explainS3 adds what to do to the S3 errors users meet most.
func explainS3(err error) error {
	if err == nil {
		return nil
	}
	switch apiCode(err) {
	case "NoSuchBucket":
		return storage.NoBucket(fmt.Errorf("%w; the bucket does not exist: create it (the worker never creates buckets) or fix the URL", err))
	case "AccessDenied", "Forbidden", "AllAccessDisabled":
		return fmt.Errorf("%w; the credentials in use may not access this object: check the aws connection and the bucket policy", err)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		return fmt.Errorf("%w; the AWS credentials were rejected: check the aws connection's login/password and session token", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "no EC2 IMDS role found") {
		return fmt.Errorf("%w; no AWS credentials were found: create an aws connection (login/password = access key id/secret) and name it in the task (export_conn_id, storage_conn_id) or the URL (s3://conn_id@bucket/key), or give the worker AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", err)
	}
	return err
}
