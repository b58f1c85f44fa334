package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// S3 transfer tuning. These fix the memory an upload can use, whatever the
// object's size: at most (UploadConcurrency+1) part buffers of PartSize, plus
// the first part (up to PartSize, read before the upload knows whether it is
// multipart). With the values below that is about 48 MiB per upload.
const (
	PartSize          = 8 << 20
	UploadConcurrency = 4
)

// Server-side copy limits. S3 refuses CopyObject above 5 GiB, so bigger
// objects are copied in ranges with UploadPartCopy. Variables so that tests
// can exercise the multipart path with small objects.
var (
	maxSingleCopy int64 = 5 << 30
	copyPartSize  int64 = 512 << 20
)

// cleanupTimeout bounds the calls that undo a failed transfer (abort
// multipart upload, delete partial). They run on a fresh context so that a
// cancelled task still cleans up after itself.
const cleanupTimeout = time.Minute

type s3Store struct {
	bucket string
	client *s3.Client
	blob   *blob.Bucket // reads, existence checks and error codes
	tm     *transfermanager.Client
}

func openS3Store(ctx context.Context, loc location, opt Options) (*s3Store, error) {
	client, checksums, err := newS3Client(ctx, opt.AWS, loc.bucket)
	if err != nil {
		return nil, err
	}
	b, err := s3blob.OpenBucket(ctx, client, loc.bucket, &s3blob.Options{RequestChecksumCalculation: checksums})
	if err != nil {
		return nil, fmt.Errorf("opening bucket %q: %w", loc.bucket, err)
	}
	return &s3Store{bucket: loc.bucket, client: client, blob: b, tm: newUploader(client, checksums)}, nil
}

// newUploader is the multipart uploader used for every S3 write.
func newUploader(client *s3.Client, checksums aws.RequestChecksumCalculation) *transfermanager.Client {
	return transfermanager.New(client, func(o *transfermanager.Options) {
		o.PartSizeBytes = PartSize
		o.MultipartUploadThreshold = PartSize
		o.Concurrency = UploadConcurrency
		o.RequestChecksumCalculation = checksums
		// Abort the multipart upload on a fresh context, so a cancelled task
		// does not leave invisible (but billed) parts behind.
		o.FailTimeout = cleanupTimeout
	})
}

// newS3Client builds a client from an aws connection, or from the default
// credential chain when cfg is nil or has no keys. A custom endpoint (MinIO,
// versitygw, ...) gets path-style addressing and checksums only when
// required, which is what S3-compatible servers support.
func newS3Client(ctx context.Context, cfg *connections.AWSConfig, bucket string) (*s3.Client, aws.RequestChecksumCalculation, error) {
	var c connections.AWSConfig
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
		return nil, 0, fmt.Errorf("loading AWS configuration: %w; check AWS_* environment variables and ~/.aws/config", err)
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
	checksums := aws.RequestChecksumCalculationWhenSupported
	if endpoint != "" {
		checksums = aws.RequestChecksumCalculationWhenRequired
	}
	region := awsCfg.Region
	mk := func(region string) *s3.Client {
		return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
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
			return nil, 0, fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", bucket)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("no AWS region configured and finding the region of bucket %q failed (%v); set extra region_name on the aws connection or AWS_REGION", bucket, err)
		}
		region = r
	}
	return mk(region), checksums, nil
}

func (s *s3Store) write(ctx context.Context, key string, r io.Reader) error {
	// A read error from r makes the uploader abort the multipart upload, so
	// nothing appears at key: S3 only shows an object once it is complete.
	_, err := s.tm.UploadObject(ctx, &transfermanager.UploadObjectInput{
		Bucket:      aws.String(s.bucket),
		Key:         aws.String(key),
		Body:        r,
		ContentType: aws.String("application/octet-stream"),
	})
	return explainS3(err)
}

func (s *s3Store) open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := s.blob.NewReader(ctx, key, nil)
	if err != nil {
		if isNoSuchBucket(err) {
			return nil, explainS3(err)
		}
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, ErrNotFound
		}
		return nil, explainS3(err)
	}
	return r, nil
}

func (s *s3Store) exists(ctx context.Context, key string) (bool, error) {
	ok, err := s.blob.Exists(ctx, key)
	if err != nil {
		return false, explainS3(err)
	}
	return ok, nil
}

func (s *s3Store) remove(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil && !isNotFound(err) {
		return explainS3(err)
	}
	return nil
}

// errSourceLeft reports a move whose copy succeeded but whose source could
// not be deleted: the destination is in place, a partial is left over.
type errSourceLeft struct{ err error }

func (e *errSourceLeft) Error() string {
	return "copied, but deleting the source failed: " + e.err.Error()
}
func (e *errSourceLeft) Unwrap() error { return e.err }

func (s *s3Store) move(ctx context.Context, src, dst string, size int64) error {
	var err error
	if size > maxSingleCopy {
		err = s.multipartCopy(ctx, src, dst, size)
	} else {
		_, err = s.client.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket:     aws.String(s.bucket),
			Key:        aws.String(dst),
			CopySource: aws.String(copySource(s.bucket, src)),
		})
	}
	if err != nil {
		if isNotFound(err) && !isNoSuchBucket(err) {
			return ErrNotFound
		}
		return explainS3(err)
	}
	if err := s.remove(ctx, src); err != nil {
		return &errSourceLeft{err}
	}
	return nil
}

// multipartCopy copies an object too big for CopyObject in ranges, on the
// server, UploadConcurrency ranges at a time.
func (s *s3Store) multipartCopy(ctx context.Context, src, dst string, size int64) error {
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:      aws.String(s.bucket),
		Key:         aws.String(dst),
		ContentType: aws.String("application/octet-stream"),
	})
	if err != nil {
		return err
	}
	nParts := int((size + copyPartSize - 1) / copyPartSize)
	parts := make([]types.CompletedPart, nParts)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(UploadConcurrency)
	for i := 0; i < nParts; i++ {
		g.Go(func() error {
			first := int64(i) * copyPartSize
			last := min(first+copyPartSize, size) - 1
			out, err := s.client.UploadPartCopy(gctx, &s3.UploadPartCopyInput{
				Bucket:          aws.String(s.bucket),
				Key:             aws.String(dst),
				UploadId:        created.UploadId,
				PartNumber:      aws.Int32(int32(i + 1)),
				CopySource:      aws.String(copySource(s.bucket, src)),
				CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", first, last)),
			})
			if err != nil {
				return err
			}
			parts[i] = types.CompletedPart{ETag: out.CopyPartResult.ETag, PartNumber: aws.Int32(int32(i + 1))}
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket:          aws.String(s.bucket),
			Key:             aws.String(dst),
			UploadId:        created.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		})
	}
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: aws.String(dst), UploadId: created.UploadId,
		}); aerr != nil {
			return fmt.Errorf("%w (and aborting the multipart copy %s failed: %v)", err, aws.ToString(created.UploadId), aerr)
		}
		return err
	}
	return nil
}

func (s *s3Store) close() error { return s.blob.Close() }

// copySource is the x-amz-copy-source value: bucket/key, percent-encoded
// except for the slashes between key segments.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(seg), "+", "%2B")
	}
	return bucket + "/" + strings.Join(segs, "/")
}

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
	return gcerrors.Code(err) == gcerrors.NotFound
}

// explainS3 adds what to do to the S3 errors users meet most.
func explainS3(err error) error {
	if err == nil {
		return nil
	}
	switch apiCode(err) {
	case "NoSuchBucket":
		return fmt.Errorf("%w; the bucket does not exist: create it (the worker never creates buckets) or fix the URL", err)
	case "AccessDenied", "Forbidden", "AllAccessDisabled":
		return fmt.Errorf("%w; the credentials in use may not access this object: check the aws connection and the bucket policy", err)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		return fmt.Errorf("%w; the AWS credentials were rejected: check the aws connection's login/password and session token", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "no EC2 IMDS role found") {
		return fmt.Errorf("%w; no AWS credentials were found: set login/password on the aws connection, or give the worker AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", err)
	}
	return err
}
