package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// What a killed worker or a storage outage leaves behind: the temporary
// file a file:// write renames into place (<name>.<hex>.tmp), the staging
// object of a multi-file export (<dest>.<12 hex>.partial, possibly with its
// own .tmp), and on S3 multipart uploads that were never completed (billed,
// and invisible in the bucket listing).
// Matched without regexps, which as package variables would be compiled at
// every task start.
func leftoverPartial(name string) bool { return randhex.Suffixed(name, ".partial", 12, 12) }
func leftoverTemp(name string) bool    { return randhex.Suffixed(name, ".tmp", 8, 16) }

// Leftover kinds.
const (
	LeftoverTempFile  = "temporary file"
	LeftoverPartial   = "partial"
	LeftoverMultipart = "unfinished multipart upload"
)

// Leftover is one piece of an interrupted transfer.
type Leftover struct {
	URL      string    `json:"url"`
	Kind     string    `json:"kind"`
	Size     int64     `json:"size,omitempty"` // -1 when unknown (multipart uploads)
	Since    time.Time `json:"since"`          // modified, or initiated
	UploadID string    `json:"upload_id,omitempty"`
}

// SweepReport is what Sweep found under one prefix and what it removed.
type SweepReport struct {
	Prefix  string     `json:"prefix"`
	Found   []Leftover `json:"found"`
	Removed []string   `json:"removed"`
}

// Sweep finds the leftovers of interrupted transfers under prefix
// (s3://bucket/some/prefix, file:///dir) last touched before cutoff, and
// removes them unless dryRun. Only names this package writes are
// considered; everything else under the prefix is left alone. A leftover
// that could not be removed makes it fail, after trying the others.
// file:// prefixes must lie under FileRootsEnv like any file:// URL.
func Sweep(ctx context.Context, prefix string, cutoff time.Time, dryRun bool, opt Options) (SweepReport, error) {
	u, err := url.Parse(prefix)
	if err != nil {
		return SweepReport{}, fmt.Errorf("sweep: %q is not a URL prefix such as s3://bucket/prefix or file:///dir: %v", redactURL(prefix), err)
	}
	rep := SweepReport{Prefix: redactURL(prefix), Found: []Leftover{}, Removed: []string{}}
	switch strings.ToLower(u.Scheme) {
	case "file":
		err = sweepFiles(u, cutoff, dryRun, &rep)
	case "s3", "s3a":
		err = sweepS3(ctx, u, cutoff, dryRun, opt, &rep)
	default:
		err = fmt.Errorf("sweep: %q: only s3:// and file:// prefixes can be swept", redactURL(prefix))
	}
	return rep, err
}

func sweepFiles(u *url.URL, cutoff time.Time, dryRun bool, rep *SweepReport) error {
	if u.Host != "" && u.Host != "localhost" || !strings.HasPrefix(u.Path, "/") {
		return fmt.Errorf("sweep: %q is not a local directory; write it as file:///absolute/dir", u.String())
	}
	dir := filepath.Clean(u.Path)
	fr, rel, err := confine(dir)
	if err != nil {
		return fmt.Errorf("sweep: file://%s: %w", dir, err)
	}
	root, err := fr.open()
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer root.Close()
	var failed []string
	// Walking through the root never leaves it: symlinked directories are
	// not followed and a path that resolves outside is refused.
	err = fs.WalkDir(root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == rel {
				return fs.SkipAll // nothing was ever written there
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		kind := ""
		switch name := d.Name(); {
		case leftoverTemp(name):
			kind = LeftoverTempFile
		case leftoverPartial(name):
			kind = LeftoverPartial
		default:
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return nil // gone meanwhile, or maybe still being written
		}
		full := filepath.Join(fr.dir, p)
		rep.Found = append(rep.Found, Leftover{URL: "file://" + full, Kind: kind, Size: fi.Size(), Since: fi.ModTime().UTC()})
		if dryRun {
			return nil
		}
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed = append(failed, fmt.Sprintf("%s (%v)", full, unwrapPath(err)))
			return nil
		}
		rep.Removed = append(rep.Removed, "file://"+full)
		return nil
	})
	if err != nil {
		return fmt.Errorf("sweep: walking %s: %v", dir, unwrapPath(err))
	}
	return sweepFailed(failed)
}

func sweepS3(ctx context.Context, u *url.URL, cutoff time.Time, dryRun bool, opt Options, rep *SweepReport) error {
	bucket := u.Host
	if bucket == "" {
		return fmt.Errorf("sweep: %q has no bucket; write it as s3://bucket/prefix", redactURL(u.String()))
	}
	cfg, err := CredentialsFor[*AWSConfig](opt, "s3")
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if u.User != nil && cfg == nil {
		return fmt.Errorf("sweep: %s names connection %q; resolve it and pass its credentials", redactURL(u.String()), u.User.Username())
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	client, err := newS3Client(ctx, cfg, bucket)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	at := func(key string) string { return "s3://" + bucket + "/" + key }
	var failed []string

	pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("sweep: listing s3://%s/%s: %w", bucket, prefix, explainS3(err))
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if !leftoverPartial(path.Base(key)) || !aws.ToTime(o.LastModified).Before(cutoff) {
				continue
			}
			rep.Found = append(rep.Found, Leftover{URL: at(key), Kind: LeftoverPartial, Size: aws.ToInt64(o.Size), Since: aws.ToTime(o.LastModified).UTC()})
			if dryRun {
				continue
			}
			if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key}); err != nil && !isNotFound(err) {
				failed = append(failed, fmt.Sprintf("%s (%v)", at(key), explainS3(err)))
				continue
			}
			rep.Removed = append(rep.Removed, at(key))
		}
	}

	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
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
			l := Leftover{URL: at(key), Kind: LeftoverMultipart, Size: -1, Since: aws.ToTime(up.Initiated).UTC(), UploadID: aws.ToString(up.UploadId)}
			rep.Found = append(rep.Found, l)
			if dryRun {
				continue
			}
			if _, err := client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: up.Key, UploadId: up.UploadId}); err != nil && !isNotFound(err) && apiCode(err) != "NoSuchUpload" {
				failed = append(failed, fmt.Sprintf("%s upload %s (%v)", at(key), l.UploadID, explainS3(err)))
				continue
			}
			rep.Removed = append(rep.Removed, at(key)+" (upload "+l.UploadID+")")
		}
		if !aws.ToBool(out.IsTruncated) {
			return sweepFailed(failed)
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

func sweepFailed(failed []string) error {
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("sweep could not remove %d leftover(s): %s; run it again, or remove them by hand", len(failed), strings.Join(failed, "; "))
}

// SweepOlderThan is Sweep with a cutoff of age before now.
func SweepOlderThan(ctx context.Context, prefix string, age time.Duration, dryRun bool, opt Options) (SweepReport, error) {
	if age < 0 {
		return SweepReport{}, fmt.Errorf("sweep: the age %v is negative; give how old a leftover must be, e.g. 24h", age)
	}
	return Sweep(ctx, prefix, time.Now().Add(-age), dryRun, opt)
}
